// Package resources is what both modes of netdev-dp (pkg/netdev/dpmode,
// pkg/netdev/dramode) share about the configured resources: the config file,
// each resource's device source and CDI spec writer, which resource owns each
// host device (so that no device is served twice), and the device-info dp/
// directory both modes write into.
package resources
