package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// AdminUser is the identity the standalone server's admin token carries.
const AdminUser = "watchkeeper-admin"

// healthPaths are what an unauthenticated caller may reach in standalone
// mode: enough for probes, nothing about the data.
var healthPaths = []string{"/healthz", "/readyz", "/livez"}

func isHealthPath(p string) bool {
	for _, h := range healthPaths {
		if p == h || strings.HasPrefix(p, h+"/") {
			return true
		}
	}
	return false
}

// loadOrCreateToken returns the admin bearer token kept in path (mode 0600),
// creating a random one on first start.
func loadOrCreateToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		if tok := strings.TrimSpace(string(data)); tok != "" {
			return tok, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generating the admin token: %w", err)
	}
	tok := base64.RawURLEncoding.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", err
	}
	return tok, nil
}

// standaloneAuthenticator accepts the admin token and, with
// --token-auth-file, the tokens listed there; every authenticated user is
// also in system:authenticated, as in kube-apiserver. A request without
// credentials passes as anonymous only on a health path, so everything
// else gets 401.
func standaloneAuthenticator(adminToken string, fileTokens authenticator.Token) authenticator.Request {
	tokens := []authenticator.Token{tokenfile.New(map[string]*user.DefaultInfo{
		adminToken: {Name: AdminUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
	})}
	if fileTokens != nil {
		tokens = append(tokens, fileTokens)
	}
	return healthAnonymous{delegate: group.NewAuthenticatedGroupAdder(bearertoken.New(tokenunion.New(tokens...)))}
}

type healthAnonymous struct{ delegate authenticator.Request }

func (a healthAnonymous) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := a.delegate.AuthenticateRequest(req)
	if ok || err != nil || !isHealthPath(req.URL.Path) {
		return resp, ok, err
	}
	return &authenticator.Response{User: &user.DefaultInfo{
		Name: user.Anonymous, Groups: []string{user.AllUnauthenticated},
	}}, true, nil
}

// standaloneAuthorizer lets system:masters do anything and anyone read the
// health endpoints; then the rules of --authorization-policy-file, if
// given, decide; everything else is denied.
type standaloneAuthorizer struct {
	policy *policyAuthorizer // nil without --authorization-policy-file
}

func (s standaloneAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := a.GetUser(); u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		return authorizer.DecisionAllow, "", nil
	}
	if !a.IsResourceRequest() && a.GetVerb() == "get" && isHealthPath(a.GetPath()) {
		return authorizer.DecisionAllow, "", nil
	}
	if s.policy != nil {
		return s.policy.Authorize(ctx, a)
	}
	return authorizer.DecisionDeny, "standalone mode grants access to the admin token only (see --authorization-policy-file)", nil
}

// ConditionsAwareAuthorize: no rule here is conditional.
func (s standaloneAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(s.Authorize(ctx, a))
}

// EvaluateConditions fails closed, as for any authorizer without conditions.
func (s standaloneAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

var _ authorizer.Authorizer = standaloneAuthorizer{}
