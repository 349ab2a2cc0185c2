// Package dra holds the DRA end-to-end tests (see main_test.go); its tests own
// every file here, one file per part: the driver (netdev-dp's DRA mode), the
// kubelet side (nodesim), and devplumb reading claims and writing their status.
package dra
