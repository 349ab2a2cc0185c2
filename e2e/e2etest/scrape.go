package e2etest

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"
)

// Scrape GETs https://addr/path with token as bearer (none when empty) and returns the
// status and body; a request that gets no answer returns 0 and the error. The
// certificate is not checked: the daemons serve a self-signed one without
// --tls-cert-file.
func Scrape(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	Must(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed on purpose
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
