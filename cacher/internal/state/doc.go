// Package state is what one cache holds of its resource and the only code
// that writes it: the current objects (a store with the resource's indexes,
// and an index ordered by key), the history of past events, the snapshots of
// past states, the RV they are at and the readiness to serve them, under
// one lock (State's mu). The feed applies events and relists through
// State's methods; reads, watches and the debug view read it through the
// methods of state_read.go; nothing outside the package sees its fields or
// its lock. Its invariants are written at the State type.
package state
