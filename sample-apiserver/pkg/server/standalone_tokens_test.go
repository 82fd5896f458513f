package server

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

func writeTokenFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadTokenFile(t *testing.T) {
	path := writeTokenFile(t, "bob-token,bob,uid-bob\nops-token,otto,uid-otto,\"ops,readers\"\n")
	auth, errs := loadTokenFile(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for token, want := range map[string]*user.DefaultInfo{
		"bob-token": {Name: "bob", UID: "uid-bob"},
		"ops-token": {Name: "otto", UID: "uid-otto", Groups: []string{"ops", "readers"}},
	} {
		resp, ok, err := auth.AuthenticateToken(context.Background(), token)
		if err != nil || !ok {
			t.Fatalf("token of %s: ok=%v err=%v", want.Name, ok, err)
		}
		u := resp.User
		if u.GetName() != want.Name || u.GetUID() != want.UID || !slices.Equal(u.GetGroups(), want.Groups) {
			t.Errorf("token of %s authenticates %+v, want %+v", want.Name, u, want)
		}
	}
	if _, ok, _ := auth.AuthenticateToken(context.Background(), "nobody-token"); ok {
		t.Error("an unknown token authenticated")
	}
}

// Every problem names its line and never quotes a token: start-up errors
// are logged.
func TestLoadTokenFileErrors(t *testing.T) {
	const secret = "s3cret-value"
	for _, tc := range []struct {
		name    string
		content string
		want    []string
	}{
		{"empty", "", []string{"no tokens"}},
		{"two fields", "alice-token,alice,1\n" + secret + ",bob\n", []string{"line 2: 2 fields"}},
		{"groups not quoted", secret + ",bob,2,ops,readers\n", []string{"line 1: 5 fields", `"group1,group2"`}},
		{"empty token", ",bob,2\n", []string{"line 1: the token is empty"}},
		{"token with a space", "s3cret value,bob,2\n", []string{"line 1: the token contains white space"}},
		{"empty user", secret + ",,2\n", []string{"line 1: the user name is empty"}},
		{"duplicate", secret + ",bob,2\nother,carol,3\n" + secret + ",dave,4\n", []string{"line 3: the same token as line 1"}},
		{"empty group", secret + ",bob,2,\"ops,\"\n", []string{`line 1: an empty group name in "ops,"`}},
		{"bad quoting", "ok-token,alice,1\n" + secret + ",bob,2,\"ops\n", []string{"line 2"}},
		{"every problem at once", ",bob,1\n" + secret + ",,2\nx,y\n", []string{"line 1: the token is empty", "line 2: the user name is empty", "line 3: 2 fields"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTokenFile(t, tc.content)
			auth, errs := loadTokenFile(path)
			if auth != nil || len(errs) == 0 {
				t.Fatalf("loaded, want errors")
			}
			var all []string
			for _, err := range errs {
				all = append(all, err.Error())
				if !strings.HasPrefix(err.Error(), "--token-auth-file="+path+": ") {
					t.Errorf("error %q does not name the flag and file", err)
				}
			}
			joined := strings.Join(all, "\n")
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("errors\n%s\ndo not contain %q", joined, w)
				}
			}
			if strings.Contains(joined, "s3cret") {
				t.Errorf("an error quotes the token:\n%s", joined)
			}
		})
	}
	if _, errs := loadTokenFile(filepath.Join(t.TempDir(), "missing.csv")); len(errs) != 1 || !strings.Contains(errs[0].Error(), "no such file") {
		t.Errorf("missing file: %v", errs)
	}
}

// The admin token and the file's tokens both authenticate, each user is in
// system:authenticated, and without credentials only health paths pass.
func TestStandaloneAuthenticator(t *testing.T) {
	fileTokens, errs := loadTokenFile(writeTokenFile(t, "bob-token,bob,uid-bob,readers\n"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	a := standaloneAuthenticator("admin-token", fileTokens)
	for _, tc := range []struct {
		name, path, token string
		wantOK            bool
		wantUser          string
		wantGroups        []string
	}{
		{"admin", "/apis", "admin-token", true, AdminUser, []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
		{"bob", "/apis", "bob-token", true, "bob", []string{"readers", user.AllAuthenticated}},
		{"wrong token", "/apis", "wrong", false, "", nil},
		{"wrong token on a health path", "/readyz", "wrong", false, "", nil},
		{"anonymous", "/apis", "", false, "", nil},
		{"anonymous on a health path", "/livez", "", true, user.Anonymous, []string{user.AllUnauthenticated}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "https://localhost"+tc.path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, ok, _ := a.AuthenticateRequest(req)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if resp.User.GetName() != tc.wantUser || !slices.Equal(resp.User.GetGroups(), tc.wantGroups) {
				t.Errorf("user %s %v, want %s %v", resp.User.GetName(), resp.User.GetGroups(), tc.wantUser, tc.wantGroups)
			}
		})
	}
}
