//go:build tools

// Package tools pins kwok, which make kube-e2e builds from this module: a
// module of its own, so that kwok's dependencies (its k8s.io/* versions)
// stay its own and do not move the e2e module's kubernetes v1.38.0-beta.0.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
