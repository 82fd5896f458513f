package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

const testPolicy = `
# bob may read single widgets in two namespaces, nothing else
- user: bob
  verbs: [get]
  apiGroups: [demo.watchkeeper.io]
  resources: [widgets]
  namespaces: [default, team-a]
# readers list and watch gadgets (cluster-scoped) and widgets anywhere
- group: readers
  verbs: [list, watch]
  apiGroups: ["demo.watchkeeper.io"]
  resources: [gadgets, widgets]
# ops may update any status subresource of the group, and read /metrics
- group: ops
  verbs: [update, patch]
  apiGroups: [demo.watchkeeper.io]
  resources: ["*/status"]
- group: ops
  verbs: [get]
  nonResourceURLs: [/metrics, /apis/*]
# carol owns team-c
- user: carol
  verbs: ["*"]
  apiGroups: ["*"]
  resources: ["*"]
  namespaces: [team-c]
`

type authzCase struct {
	name  string
	user  user.Info
	attrs authorizer.AttributesRecord
	want  authorizer.Decision
}

func resourceAttrs(verb, resource, subresource, ns, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		Verb: verb, APIGroup: "demo.watchkeeper.io", APIVersion: "v1alpha1",
		Resource: resource, Subresource: subresource, Namespace: ns, Name: name, ResourceRequest: true,
	}
}

func pathAttrs(verb, path string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{Verb: verb, Path: path}
}

func TestPolicyAuthorizer(t *testing.T) {
	rules, errs := parsePolicy([]byte(testPolicy))
	if len(errs) > 0 {
		t.Fatalf("the test policy: %v", errs)
	}
	p := &policyAuthorizer{rules: rules}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{user.AllAuthenticated}}
	reader := &user.DefaultInfo{Name: "rita", Groups: []string{"readers", user.AllAuthenticated}}
	op := &user.DefaultInfo{Name: "otto", Groups: []string{"ops"}}
	carol := &user.DefaultInfo{Name: "carol"}
	// Not bob: a group named like a user must not pass for him.
	bobGroup := &user.DefaultInfo{Name: "mallory", Groups: []string{"bob"}}

	allow, deny := authorizer.DecisionAllow, authorizer.DecisionDeny
	for _, tc := range []authzCase{
		{"bob gets a widget in default", bob, resourceAttrs("get", "widgets", "", "default", "w1"), allow},
		{"bob gets a widget in team-a", bob, resourceAttrs("get", "widgets", "", "team-a", "w1"), allow},
		{"bob gets a widget in another namespace", bob, resourceAttrs("get", "widgets", "", "kube-system", "w1"), deny},
		{"bob lists widgets", bob, resourceAttrs("list", "widgets", "", "default", ""), deny},
		{"bob watches widgets", bob, resourceAttrs("watch", "widgets", "", "default", ""), deny},
		{"bob gets a widget's status", bob, resourceAttrs("get", "widgets", "status", "default", "w1"), deny},
		{"bob gets a gadget", bob, resourceAttrs("get", "gadgets", "", "", "g1"), deny},
		{"bob creates a widget", bob, resourceAttrs("create", "widgets", "", "default", ""), deny},
		{"bob gets /apis", bob, pathAttrs("get", "/apis"), deny},
		{"a group named bob is not bob", bobGroup, resourceAttrs("get", "widgets", "", "default", "w1"), deny},
		{"bob's rule in another API group", bob, authorizer.AttributesRecord{Verb: "get", APIGroup: "apps", Resource: "widgets", Namespace: "default", ResourceRequest: true}, deny},

		{"a reader lists widgets cluster-wide", reader, resourceAttrs("list", "widgets", "", "", ""), allow},
		{"a reader watches widgets in a namespace", reader, resourceAttrs("watch", "widgets", "", "default", ""), allow},
		{"a reader watches gadgets", reader, resourceAttrs("watch", "gadgets", "", "", ""), allow},
		{"a reader gets a widget", reader, resourceAttrs("get", "widgets", "", "default", "w1"), deny},
		{"a reader deletes gadgets", reader, resourceAttrs("deletecollection", "gadgets", "", "", ""), deny},

		{"ops update a widget's status", op, resourceAttrs("update", "widgets", "status", "default", "w1"), allow},
		{"ops patch a gadget's status", op, resourceAttrs("patch", "gadgets", "status", "", "g1"), allow},
		{"ops update a widget", op, resourceAttrs("update", "widgets", "", "default", "w1"), deny},
		{"ops read /metrics", op, pathAttrs("get", "/metrics"), allow},
		{"ops read /apis/demo.watchkeeper.io", op, pathAttrs("get", "/apis/demo.watchkeeper.io"), allow},
		{"ops read /apis itself", op, pathAttrs("get", "/apis"), deny},
		{"ops post to /metrics", op, pathAttrs("post", "/metrics"), deny},

		{"carol deletes in team-c", carol, resourceAttrs("delete", "widgets", "", "team-c", "w1"), allow},
		{"carol lists widgets cluster-wide", carol, resourceAttrs("list", "widgets", "", "", ""), deny},
		{"carol gets a gadget (cluster-scoped)", carol, resourceAttrs("get", "gadgets", "", "", "g1"), deny},
		{"carol reads /metrics", carol, pathAttrs("get", "/metrics"), deny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.attrs.User = tc.user
			got, reason, err := p.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if got != tc.want {
				t.Errorf("decision %v (%q), want %v", got, reason, tc.want)
			}
			if got == authorizer.DecisionDeny && !strings.Contains(reason, tc.user.GetName()) {
				t.Errorf("the reason %q does not name the user", reason)
			}
			if cad := p.ConditionsAwareAuthorize(context.Background(), tc.attrs); cad.IsAllow() != (tc.want == allow) || cad.IsDeny() != (tc.want == deny) {
				t.Errorf("ConditionsAwareAuthorize disagrees with Authorize: %+v", cad)
			}
		})
	}
}

// The standalone chain: system:masters and the health endpoints come
// before the policy, and without a policy everything else is denied.
func TestStandaloneAuthorizer(t *testing.T) {
	rules, errs := parsePolicy([]byte(testPolicy))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	admin := &user.DefaultInfo{Name: AdminUser, Groups: []string{user.SystemPrivilegedGroup}}
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	bob := &user.DefaultInfo{Name: "bob"}
	for _, tc := range []struct {
		name       string
		policy     bool
		user       user.Info
		attrs      authorizer.AttributesRecord
		want       authorizer.Decision
		wantReason string
	}{
		{"admin without a policy", false, admin, resourceAttrs("delete", "gadgets", "", "", "g"), authorizer.DecisionAllow, ""},
		{"admin with a policy that does not name him", true, admin, resourceAttrs("delete", "gadgets", "", "", "g"), authorizer.DecisionAllow, ""},
		{"anonymous /readyz", true, anonymous, pathAttrs("get", "/readyz"), authorizer.DecisionAllow, ""},
		{"anonymous /livez/ping", false, anonymous, pathAttrs("get", "/livez/ping"), authorizer.DecisionAllow, ""},
		{"anonymous /healthzx is not a health path", false, anonymous, pathAttrs("get", "/healthzx"), authorizer.DecisionDeny, "admin token only"},
		{"anonymous post /readyz", false, anonymous, pathAttrs("post", "/readyz"), authorizer.DecisionDeny, "admin token only"},
		{"bob without a policy", false, bob, resourceAttrs("get", "widgets", "", "default", "w1"), authorizer.DecisionDeny, "--authorization-policy-file"},
		{"bob with the policy", true, bob, resourceAttrs("get", "widgets", "", "default", "w1"), authorizer.DecisionAllow, ""},
		{"bob watching, with the policy", true, bob, resourceAttrs("watch", "widgets", "", "default", ""), authorizer.DecisionDeny, `grants user "bob"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := standaloneAuthorizer{}
			if tc.policy {
				a.policy = &policyAuthorizer{rules: rules}
			}
			tc.attrs.User = tc.user
			got, reason, err := a.Authorize(context.Background(), tc.attrs)
			if err != nil || got != tc.want {
				t.Errorf("Authorize = %v, %q, %v; want %v", got, reason, err, tc.want)
			}
			if !strings.Contains(reason, tc.wantReason) {
				t.Errorf("reason %q, want it to contain %q", reason, tc.wantReason)
			}
		})
	}
}

func writePolicyFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadPolicyFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy string
		want   []string // each must appear in some error
	}{
		{"missing file", "", []string{"no such file"}},
		{"empty list", "[]", []string{"no rules"}},
		{"not a list", "user: bob\nverbs: [get]\n", []string{"want a list of rules"}},
		{"bad YAML", "- user: bob\n  verbs: [get\n", []string{"yaml"}},
		{"unknown verb", "- user: bob\n  verbs: [get, lsit]\n  apiGroups: ['*']\n  resources: ['*']\n", []string{`rule 1: unknown verb "lsit"`}},
		{"unknown field", "- user: bob\n  verb: [get]\n  apiGroups: ['*']\n  resources: ['*']\n", []string{`rule 1: json: unknown field "verb"`}},
		{"no subject", "- verbs: [get]\n  apiGroups: ['*']\n  resources: ['*']\n", []string{"rule 1: names no user and no group"}},
		{"two subjects", "- {user: bob, group: g, verbs: [get], apiGroups: ['*'], resources: ['*']}\n", []string{"rule 1: names both"}},
		{"no verbs", "- {user: bob, apiGroups: ['*'], resources: ['*']}\n", []string{"rule 1: verbs is empty"}},
		{"no apiGroups", "- {user: bob, verbs: [get], resources: [widgets]}\n", []string{"rule 1: apiGroups is empty"}},
		{"no resources", "- {user: bob, verbs: [get], apiGroups: ['*']}\n", []string{"rule 1: resources is empty"}},
		{"mixed", "- {user: bob, verbs: [get], apiGroups: ['*'], resources: ['*'], nonResourceURLs: [/metrics]}\n", []string{"rule 1: mixes nonResourceURLs"}},
		{"relative URL", "- {user: bob, verbs: [get], nonResourceURLs: [metrics]}\n", []string{`rule 1: nonResourceURL "metrics"`}},
		{"list is not a non-resource verb", "- {user: bob, verbs: [list], nonResourceURLs: [/metrics]}\n", []string{`rule 1: unknown verb "list"`}},
		{"every problem, each with its rule", "- {user: bob, verbs: [get], apiGroups: ['*'], resources: ['*']}\n- {group: g, verbs: [fetch], apiGroups: ['*'], resources: ['a/b/c']}\n- {verbs: [get], apiGroups: ['*'], resources: ['*'], namespaces: ['']}\n",
			[]string{`rule 2: unknown verb "fetch"`, `rule 2: resource "a/b/c"`, "rule 3: names no user", "rule 3: an empty namespace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "missing.yaml")
			if tc.name != "missing file" {
				path = writePolicyFile(t, tc.policy)
			}
			p, errs := loadPolicyFile(path)
			if p != nil || len(errs) == 0 {
				t.Fatalf("loaded %+v, want errors", p)
			}
			var all []string
			for _, err := range errs {
				if !strings.HasPrefix(err.Error(), "--authorization-policy-file="+path+": ") {
					t.Errorf("error %q does not name the flag and file", err)
				}
				all = append(all, err.Error())
			}
			joined := strings.Join(all, "\n")
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("errors\n%s\ndo not contain %q", joined, w)
				}
			}
		})
	}
}

// JSON is YAML: the same rules load from either.
func TestLoadPolicyFileJSON(t *testing.T) {
	p, errs := loadPolicyFile(writePolicyFile(t, `[{"user": "bob", "verbs": ["get"], "apiGroups": ["demo.watchkeeper.io"], "resources": ["widgets"]}]`))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	attrs := resourceAttrs("get", "widgets", "", "any", "w")
	attrs.User = &user.DefaultInfo{Name: "bob"}
	if d, reason, _ := p.Authorize(context.Background(), attrs); d != authorizer.DecisionAllow {
		t.Errorf("bob get widgets = %v %q, want allowed", d, reason)
	}
}
