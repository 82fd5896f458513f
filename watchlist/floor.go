package watchlist

// Floor is the lowest resourceVersion the bookmark ending a watcher's initial
// events may carry. The client uses that bookmark to know its snapshot is
// complete, so it must not come before any object the snapshot holds:
//
//   - no resourceVersion requested (a consistent read): the RV the cache was
//     required to reach before serving, requiredRV;
//   - "0" (any state will do): whatever the cache holds now, currentRV, which
//     is the RV of the initial events about to be sent;
//   - an exact RV: the requested one, parsedRV.
func Floor(requestedRV string, parsedRV, requiredRV, currentRV uint64) uint64 {
	switch {
	case requestedRV == "":
		return requiredRV
	case parsedRV == 0:
		return currentRV
	default:
		return parsedRV
	}
}
