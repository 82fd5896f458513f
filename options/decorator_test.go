package options

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// --watch-cache-decorator takes the three caches a server can run, keeps
// the caller's default, and a typo is an error that lists the choices.
func TestDecoratorFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    string
		wantErr bool
	}{
		{args: nil, want: DecoratorWatchkeeper},
		{args: []string{"--watch-cache-decorator=upstream"}, want: DecoratorUpstream},
		{args: []string{"--watch-cache-decorator=none"}, want: DecoratorNone},
		{args: []string{"--watch-cache-decorator=watchkeeper"}, want: DecoratorWatchkeeper},
		{args: []string{"--watch-cache-decorator=Upstream"}, want: "Upstream", wantErr: true},
		{args: []string{"--watch-cache-decorator="}, want: "", wantErr: true},
	} {
		name := DecoratorWatchkeeper
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		AddDecoratorFlag(fs, &name)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if name != tc.want {
			t.Errorf("%v: decorator %q, want %q", tc.args, name, tc.want)
		}
		err := ValidateDecorator(name)
		if (err != nil) != tc.wantErr {
			t.Errorf("%v: ValidateDecorator(%q) = %v, want error %v", tc.args, name, err, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "watchkeeper, upstream, none") {
			t.Errorf("%v: error %q does not list the choices", tc.args, err)
		}
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	name := DecoratorUpstream
	AddDecoratorFlag(fs, &name)
	if usage := fs.FlagUsages(); !strings.Contains(usage, `(default "upstream")`) {
		t.Errorf("the caller's default is not the flag's:\n%s", usage)
	}
}
