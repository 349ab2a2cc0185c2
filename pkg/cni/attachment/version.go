package attachment

import (
	"encoding/json"
	"errors"
	"fmt"
)

// FormatVersion is the format of the records this devplumb writes. Every
// record carries it ("version"), so that after a downgrade the older binary
// can tell a record a newer devplumb wrote, whose fields it may misread, from
// one of its own. Records written before the field existed read as 0: the
// format of today, read as before.
//
// Raise it when a record's meaning changes in a way an older devplumb would
// get wrong (a field it would drop when rewriting, or misinterpret); a new
// optional field older binaries may ignore needs no new version.
const FormatVersion = 1

// ErrNewerFormat marks a record written by a newer devplumb than this one.
var ErrNewerFormat = errors.New("state record of a newer devplumb")

// NewerFormatError is a record this devplumb does not know the format of.
type NewerFormatError struct {
	File    string // the record's path
	Version int    // its format version
}

func (e *NewerFormatError) Error() string {
	return fmt.Sprintf("state file %s has format version %d, newer than the %d this devplumb knows "+
		"(a newer devplumb wrote it; devplumb was downgraded): leaving it alone; upgrade devplumb again to release it",
		e.File, e.Version, FormatVersion)
}

func (e *NewerFormatError) Unwrap() error { return ErrNewerFormat }

// Newer returns a *NewerFormatError when a newer devplumb wrote the record:
// this one must not take it over, collect or rewrite it, since it cannot know
// what the newer one set up. It returns nil for this format and older ones.
func (a *Record) Newer() error {
	if a == nil || a.Version <= FormatVersion {
		return nil
	}
	return &NewerFormatError{File: a.file, Version: a.Version}
}

// newerUndecodable tells, for a record that does not decode, whether it is of
// a newer format (its "version" alone still decodes): such a record is not
// corrupt and must not be removed as corrupt.
func newerUndecodable(p string, data []byte) error {
	var v struct {
		Version int `json:"version"`
	}
	if json.Unmarshal(data, &v) != nil || v.Version <= FormatVersion {
		return nil
	}
	return &NewerFormatError{File: p, Version: v.Version}
}
