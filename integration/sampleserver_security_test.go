package integration

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"flag"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/testchild"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

// The standalone sample apiserver's security: TLS only, nothing for
// anonymous callers beyond the health endpoints, users of a token file held
// to the rules of a policy file (a real authorizer, not a stub), credential
// files 0600 in a data directory only its owner can enter, and no token in
// its logs.
//
// Helpers here carry an sec prefix.

// secLogVerbosity is the -v the test's log is captured at (secCaptureLogs).
const secLogVerbosity = 8

// secToken is a random bearer token, so finding it in a log is no accident.
func secToken(t *testing.T) string {
	t.Helper()
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(raw)
}

func secWrite(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// secAs is cfg with a bearer token of another user.
func secAs(cfg *rest.Config, token string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.BearerToken, c.BearerTokenFile = token, ""
	return c
}

// secCaptureLogs sends klog's output, at -v=8, to the returned buffer
// until the test ends. The server runs in this process, so this is the
// server's log (and the test clients'); only the embedded etcd's own logger,
// warnings and up, writes elsewhere.
//
// 8 is the highest verbosity without a data race in client-go: from 9 on
// its debugging round tripper sets HTTP trace callbacks that a dial goes on
// calling after the request took another connection (seen under -race in
// this test's anonymous requests). At 8 it still logs every request's
// headers, where a token would show, with Authorization masked.
func secCaptureLogs(t *testing.T) *siLockedBuffer {
	t.Helper()
	out := &siLockedBuffer{}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	oldV := fs.Lookup("v").Value.String()
	if err := fs.Set("v", strconv.Itoa(secLogVerbosity)); err != nil {
		t.Fatal(err)
	}
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	klog.SetOutputBySeverity("INFO", out) // every severity lands here once
	t.Cleanup(func() {
		klog.Flush()
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
		_ = fs.Set("v", oldV)
	})
	return out
}

func TestSampleServerSecurity(t *testing.T) {
	t.Parallel() // in a process of its own: it sets klog's verbosity for the process
	if !testchild.Isolate(t) {
		return
	}
	logs := secCaptureLogs(t)
	files := t.TempDir()
	adminTokenWrong, bobToken, carolToken := secToken(t), secToken(t), secToken(t)
	tokens := secWrite(t, files, "tokens.csv",
		bobToken+",bob,uid-bob\n"+
			carolToken+`,carol,uid-carol,"viewers,auditors"`+"\n")
	// bob may get widgets in default, and nothing else; carol has no rule.
	policy := secWrite(t, files, "policy.yaml", `
- user: bob
  verbs: [get]
  apiGroups: [demo.watchkeeper.io]
  resources: [widgets]
  namespaces: [default]
`)
	dataDir := filepath.Join(t.TempDir(), "state") // the server creates it
	s := startSampleServer(t, "--data-dir="+dataDir, "--token-auth-file="+tokens, "--authorization-policy-file="+policy)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adminToken := s.Admin.BearerToken
	if adminToken == "" {
		t.Fatal("the admin kubeconfig carries no token")
	}

	for _, ns := range []string{"default", "other"} {
		if _, err := s.Client.DemoV1alpha1().Widgets(ns).Create(ctx, ssWidget(ns, "w1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bob, carol, wrong := secAs(s.Admin, bobToken), secAs(s.Admin, carolToken), secAs(s.Admin, adminTokenWrong)
	inDefault, inOther := ssWidgetsPath("default"), ssWidgetsPath("other")

	t.Run("authorization", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			cfg   *rest.Config
			path  string
			query url.Values
			want  int
		}{
			{"bob gets a widget in default", bob, inDefault + "/w1", nil, http.StatusOK},
			{"bob gets a widget in another namespace", bob, inOther + "/w1", nil, http.StatusForbidden},
			{"bob lists widgets in default", bob, inDefault, nil, http.StatusForbidden},
			{"bob lists widgets cluster-wide", bob, ssGroupPath + "/widgets", nil, http.StatusForbidden},
			{"bob watches widgets in default", bob, inDefault, url.Values{"watch": {"1"}}, http.StatusForbidden},
			{"bob watches one widget", bob, inDefault, url.Values{"watch": {"1"}, "fieldSelector": {"metadata.name=w1"}}, http.StatusForbidden},
			{"bob WatchLists widgets", bob, inDefault, url.Values{"watch": {"1"}, "sendInitialEvents": {"true"},
				"resourceVersionMatch": {"NotOlderThan"}, "allowWatchBookmarks": {"true"}}, http.StatusForbidden},
			{"bob gets a gadget", bob, ssGroupPath + "/gadgets/g", nil, http.StatusForbidden},
			{"bob reads /metrics", bob, "/metrics", nil, http.StatusForbidden},
			{"bob reads /readyz", bob, "/readyz", nil, http.StatusOK},
			{"carol gets a widget", carol, inDefault + "/w1", nil, http.StatusForbidden},
			{"carol watches widgets", carol, inDefault, url.Values{"watch": {"1"}}, http.StatusForbidden},
			{"carol reads /apis", carol, "/apis", nil, http.StatusForbidden},
			{"carol reads /livez", carol, "/livez", nil, http.StatusOK},
			{"a wrong token gets a widget", wrong, inDefault + "/w1", nil, http.StatusUnauthorized},
			{"a wrong token watches", wrong, inDefault, url.Values{"watch": {"1"}}, http.StatusUnauthorized},
			{"a wrong token on /readyz", wrong, "/readyz", nil, http.StatusUnauthorized},
			{"the admin lists widgets cluster-wide", s.Admin, ssGroupPath + "/widgets", nil, http.StatusOK},
			{"the admin reads /metrics", s.Admin, "/metrics", nil, http.StatusOK},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a := siDo(ctx, t, s, tc.cfg, http.MethodGet, tc.path, tc.query, nil, time.Second)
				t.Logf("GET %s?%s -> %s", tc.path, tc.query.Encode(), a)
				if a.Code != tc.want {
					t.Fatalf("HTTP %d, want %d: %s", a.Code, tc.want, a)
				}
				switch tc.want {
				case http.StatusForbidden:
					// Refused before any watch starts: a Status body, not a
					// stream with an ERROR event.
					if a.Status == nil || a.Status.Reason != metav1.StatusReasonForbidden || a.Status.Code != http.StatusForbidden {
						t.Errorf("want a Status with reason Forbidden, got %s", a)
					}
					who := map[*rest.Config]string{bob: "bob", carol: "carol"}[tc.cfg]
					if a.Status != nil && !strings.Contains(a.Status.Message, `no rule of --authorization-policy-file grants user "`+who+`"`) {
						t.Errorf("the message does not say why: %q", a.Status.Message)
					}
				case http.StatusUnauthorized:
					if a.Status == nil || a.Status.Reason != metav1.StatusReasonUnauthorized {
						t.Errorf("want a Status with reason Unauthorized, got %s", a)
					}
				}
			})
		}
	})

	t.Run("client-go", func(t *testing.T) {
		// What a program sees: bob's typed client gets, and gets 403 on
		// list and watch; the admin's watch still works.
		bc, err := clientset.NewForConfig(bob)
		if err != nil {
			t.Fatal(err)
		}
		if w, err := bc.DemoV1alpha1().Widgets("default").Get(ctx, "w1", metav1.GetOptions{}); err != nil || w.Name != "w1" {
			t.Errorf("bob get: %v, %v", w, err)
		}
		if _, err := bc.DemoV1alpha1().Widgets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("bob list: %v, want Forbidden", err)
		}
		if w, err := bc.DemoV1alpha1().Widgets("default").Watch(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			if err == nil {
				w.Stop()
			}
			t.Errorf("bob watch: %v, want Forbidden", err)
		}
		list, err := s.Client.DemoV1alpha1().Widgets("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := s.Client.DemoV1alpha1().Widgets("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatalf("admin watch: %v", err)
		}
		defer w.Stop()
		if _, err := s.Client.DemoV1alpha1().Widgets("default").Create(ctx, ssWidget("default", "w2"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ev := bhNext(t, w, 10*time.Second); ev.Type != watch.Added || ssMeta(t, ev.Object).GetName() != "w2" {
			t.Errorf("admin watch got %s, want ADDED w2", ssDescribe(ev.Event))
		}
	})

	t.Run("anonymous", func(t *testing.T) {
		// sampleserver_input_test.go covers the resource paths; these are
		// the other non-resource endpoints a generic apiserver serves.
		for path, want := range map[string]int{
			"/metrics": http.StatusUnauthorized, "/version": http.StatusUnauthorized, "/openapi/v2": http.StatusUnauthorized,
			"/openapi/v3": http.StatusUnauthorized, "/debug/pprof/": http.StatusUnauthorized, "/api": http.StatusUnauthorized,
			"/apis": http.StatusUnauthorized, "/livez/ping": http.StatusOK, "/readyz/watch-caches": http.StatusOK,
		} {
			if a := siGet(ctx, t, s, true, path, nil); a.Code != want {
				t.Errorf("anonymous GET %s = %s, want %d", path, a, want)
			}
		}
	})

	t.Run("TLS only", func(t *testing.T) {
		host := strings.TrimPrefix(s.URL, "https://")
		// Plain HTTP on the port gets Go's TLS server's refusal, no API.
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + host + ssWidgetsPath("default") + "/w1")
		if err != nil {
			t.Fatalf("plain HTTP: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(body), "w1") {
			t.Errorf("plain HTTP = %d %q, want 400 and nothing of the API", resp.StatusCode, body)
		}
		// TLS below 1.2 is refused by the server (the client offers it).
		for _, tc := range []struct {
			name   string
			max    uint16
			wantOK bool
		}{{"TLS 1.1", tls.VersionTLS11, false}, {"TLS 1.2", tls.VersionTLS12, true}, {"TLS 1.3", tls.VersionTLS13, true}} {
			conn, err := tls.Dial("tcp", host, &tls.Config{
				MinVersion: tls.VersionTLS10, MaxVersion: tc.max,
				InsecureSkipVerify: true, // only the version is under test
			})
			if err == nil {
				conn.Close()
			}
			if (err == nil) != tc.wantOK {
				t.Errorf("%s handshake: err = %v, want success %v", tc.name, err, tc.wantOK)
			}
			if err != nil && !strings.Contains(err.Error(), "protocol version") {
				t.Errorf("%s handshake failed, but not for the version: %v", tc.name, err)
			}
		}
	})

	t.Run("file modes", func(t *testing.T) {
		secCheckDataDir(t, dataDir, "etcd")
	})

	t.Run("no token in the logs", func(t *testing.T) {
		s.Stop() // its last words included
		klog.Flush()
		out := logs.String()
		// The capture works: the start-up and a refused request are in it.
		for _, want := range []string{"users of the token file authenticate too", "/namespaces/default/widgets"} {
			if !strings.Contains(out, want) {
				t.Fatalf("the captured log (%d bytes) lacks %q: the capture is broken", len(out), want)
			}
		}
		for who, token := range map[string]string{"admin": adminToken, "bob": bobToken, "carol": carolToken, "wrong": adminTokenWrong} {
			if i := strings.Index(out, token); i >= 0 {
				t.Errorf("the %s token is in the log: %q", who, out[max(0, i-200):i])
			}
		}
		t.Logf("%d bytes of log at -v=%d, no token in them", len(out), secLogVerbosity)
	})
}

// secCheckDataDir: the data directory is the owner's only, and every file
// holding a credential is 0600.
func secCheckDataDir(t *testing.T, dir string, wantDirs ...string) {
	t.Helper()
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("the data directory has mode %o, want 700", perm)
	}
	for _, name := range append([]string{"admin-token", "admin.kubeconfig", filepath.Join("certificates", "apiserver.key")}, wantDirs...) {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want := fs.FileMode(0o600)
		if info.IsDir() {
			want = 0o700
		}
		if perm := info.Mode().Perm(); perm != want {
			t.Errorf("%s has mode %o, want %o", name, perm, want)
		}
	}
}

// With an external etcd nothing else creates the data directory first:
// it must still be the owner's only.
func TestSampleServerSecurityExternalEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	dataDir := filepath.Join(t.TempDir(), "state")
	startSampleServer(t, "--data-dir="+dataDir, "--etcd-servers="+etcd.Endpoints()[0])
	secCheckDataDir(t, dataDir)
}

// A bad token or policy file stops the command before anything starts,
// naming the line or rule, and without echoing a token.
func TestSampleServerSecurityRejectsBadAuthFiles(t *testing.T) {
	files := t.TempDir()
	secret := secToken(t)
	tokens := secWrite(t, files, "tokens.csv", "good-token,alice,1\n"+secret+",bob\n")
	policy := secWrite(t, files, "policy.yaml", "- {user: alice, verbs: [get, lsit], apiGroups: ['*'], resources: ['*']}\n")
	dir := t.TempDir()
	code, out := siRunCommand(t, "--data-dir="+dir, "--secure-port="+strconv.Itoa(freeLoopbackPort(t)),
		"--token-auth-file="+tokens, "--authorization-policy-file="+policy)
	t.Logf("exit %d, output:\n%s", code, out)
	if code == 0 {
		t.Errorf("exit code 0, want non-zero")
	}
	for _, want := range []string{
		"--token-auth-file=" + tokens + ": line 2: 2 fields",
		"--authorization-policy-file=" + policy + `: rule 1: unknown verb "lsit"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q", want)
		}
	}
	if strings.Contains(out, secret) {
		t.Errorf("the output shows the token of the bad line")
	}
	siDirEmpty(t, dir)
}
