package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TempAge is how old a temp file must be for StaleTemps to take it for a
// dead writer's: a live writer renames its temp file within one
// write and fsync, so ten minutes leaves no doubt on a slow disk.
const TempAge = 10 * time.Minute

// StaleTemps lists the temp files in dir this package made (a hidden name
// ending in ".tmp-" and digits) that were last written more than age ago:
// a writer killed between its create and its rename leaves one, which no
// reader lists; whoever owns dir removes them. A missing dir has none.
func StaleTemps(dir string, age time.Duration) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s for stale temp files: %w", dir, err)
	}
	var stale []string
	for _, e := range entries {
		if !e.Type().IsRegular() || !IsTempName(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) <= age {
			continue // gone meanwhile, or maybe a live writer's
		}
		stale = append(stale, filepath.Join(dir, e.Name()))
	}
	return stale, nil
}

// IsTempName is whether name is one tempName makes.
func IsTempName(name string) bool {
	i := strings.LastIndex(name, ".tmp-")
	if !strings.HasPrefix(name, ".") || i < 1 {
		return false
	}
	digits := name[i+len(".tmp-"):]
	return digits != "" && strings.Trim(digits, "0123456789") == ""
}
