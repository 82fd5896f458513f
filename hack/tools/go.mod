// The linters hack/verify.sh runs, pinned here (and in go.sum) so that every
// machine builds the same ones from the Go module proxy. A module of its own,
// so the linters' dependencies never move the versions watchkeeper builds with.
module github.com/watchkeeper/watchkeeper/hack/tools

go 1.26.8

tool (
	github.com/polyfloyd/go-errorlint
	honnef.co/go/tools/cmd/staticcheck
	mvdan.cc/unparam
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	github.com/polyfloyd/go-errorlint v1.8.0 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
	mvdan.cc/unparam v0.0.0-20260823230713-2fa3d841b0c8 // indirect
)
