// Package dpmode is netdev-dp's device plugin mode: for every configured
// resource it runs the resource's device source (opened with
// pkg/netdev/resources), a device plugin server (pkg/deviceplugin), the
// resource's CDI spec file (pkg/cdispec) and its device plugin device-info
// files (devinfo), and keeps all of them in step with the source.
package dpmode
