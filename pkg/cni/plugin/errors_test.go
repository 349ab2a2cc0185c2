package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// A delegate's CNI spec code reaches the runtime; its own 100+ codes (and
// libcni's 999) would read as devplumb's and become 103, naming the code.
func TestDelegateErrorCodes(t *testing.T) {
	cases := []struct {
		err  error
		code uint
		msg  string
	}{
		{types.NewError(types.ErrInvalidNetworkConfig, "bad ipam", ""), types.ErrInvalidNetworkConfig, "ADD: bad ipam"},
		{types.NewError(101, "vendor reason", ""), ErrDelegate, "delegate error code 101: vendor reason"},
		{types.NewError(types.ErrInternal, "boom", ""), ErrDelegate, "delegate error code 999: boom"},
		{errors.New("exec: not found"), ErrDelegate, "ADD"},
	}
	for _, tc := range cases {
		got := delegateError("ADD", tc.err)
		if got.Code != tc.code || !strings.Contains(got.Msg, tc.msg) || !strings.Contains(got.Details, tc.err.Error()) {
			t.Errorf("%v: got %d %q %q, want %d %q", tc.err, got.Code, got.Msg, got.Details, tc.code, tc.msg)
		}
	}
}
