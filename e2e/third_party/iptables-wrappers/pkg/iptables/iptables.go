// Package iptables declares what k8s.io/kubernetes/pkg/kubelet uses of
// sigs.k8s.io/iptables-wrappers, with no iptables behind it (see go.mod).
package iptables

import (
	"context"
	"time"
)

// Chain, Table and Protocol name iptables objects, as the real package's.
type (
	Chain        string
	Table        string
	Protocol     string
	RulePosition string
	// Mode is how NewBestEffort picks an iptables binary.
	Mode string
)

const (
	TableNAT    Table = "nat"
	TableFilter Table = "filter"
	TableMangle Table = "mangle"

	ChainInput       Chain = "INPUT"
	ChainOutput      Chain = "OUTPUT"
	ChainForward     Chain = "FORWARD"
	ChainPrerouting  Chain = "PREROUTING"
	ChainPostrouting Chain = "POSTROUTING"

	ProtocolIPv4 Protocol = "IPv4"
	ProtocolIPv6 Protocol = "IPv6"

	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"

	UseInstalledMode Mode = "installed"
)

// Interface is the part of the real client kubelet calls.
type Interface interface {
	Protocol() Protocol
	IsIPv6() bool
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// NewBestEffort returns the clients of the iptables families the host
// supports: none here.
func NewBestEffort(context.Context, Mode) map[Protocol]Interface { return nil }
