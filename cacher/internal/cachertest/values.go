package cachertest

// Seq is the RVs from through to, both included.
func Seq(from, to uint64) []uint64 {
	var out []uint64
	for rv := from; rv <= to; rv++ {
		out = append(out, rv)
	}
	return out
}

// WebOrNot is the app label of pod i: every other one web.
func WebOrNot(i int) string {
	if i%2 == 0 {
		return "web"
	}
	return "db"
}
