package podresources

import "time"

// SetClock replaces the client's clock, so tests move time without waiting.
func SetClock(c *Client, now func() time.Time) { c.now = now }

// GetRecheck is how long a client keeps to List after an unusable Get.
const GetRecheck = getRecheck
