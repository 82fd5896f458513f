package server

import (
	"path/filepath"
	"strings"
	"testing"
)

// A bad token or policy file stops the server at validation, listing each
// problem; aggregated mode rejects the flags, whose job the cluster does.
func TestValidateStandaloneAuthFlags(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokenFile(t, "bob-token,bob,1\nx,y\n")
	for _, tc := range []struct {
		name  string
		setup func(o *Options)
		want  []string
	}{
		{"good files", func(o *Options) {
			o.TokenAuthFile = writeTokenFile(t, "bob-token,bob,1\n")
			o.AuthorizationPolicyFile = writePolicyFile(t, "- {user: bob, verbs: [get], apiGroups: ['*'], resources: [widgets]}\n")
		}, nil},
		{"bad files", func(o *Options) {
			o.TokenAuthFile = tokens
			o.AuthorizationPolicyFile = filepath.Join(dir, "missing.yaml")
		}, []string{"--token-auth-file=" + tokens + ": line 2: 2 fields", "--authorization-policy-file=" + filepath.Join(dir, "missing.yaml") + ": open"}},
		{"aggregated", func(o *Options) {
			o.Recommended.CoreAPI.CoreAPIKubeconfigPath = filepath.Join(dir, "kubeconfig")
			o.TokenAuthFile = "x"
			o.AuthorizationPolicyFile = "y"
		}, []string{"--token-auth-file applies to standalone mode only", "--authorization-policy-file applies to standalone mode only"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			o := NewOptions()
			tc.setup(o)
			errs := o.validateStandaloneAuth()
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to start with %q", i, errs[i], w)
				}
			}
		})
	}
}
