package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// PolicyRule is one grant of --authorization-policy-file: a user or a
// group may use verbs on resources (of apiGroups, in namespaces) or on
// non-resource URLs. Matching follows RBAC's: "*" is anything,
// "widgets/status" a subresource, "widgets/*" every subresource of widgets,
// and a non-resource URL ending in "*" a prefix.
type PolicyRule struct {
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`

	Verbs []string `json:"verbs"`

	APIGroups []string `json:"apiGroups,omitempty"`
	Resources []string `json:"resources,omitempty"`
	// Namespaces empty (or holding "*") matches every namespace and
	// cluster-scoped requests; otherwise only requests within one of them,
	// so a cluster-wide list of a namespaced resource does not match.
	Namespaces []string `json:"namespaces,omitempty"`

	NonResourceURLs []string `json:"nonResourceURLs,omitempty"`
}

// The verbs a rule may name. Anything else is a typo that would silently
// grant nothing, so it stops the server instead.
var (
	resourceVerbs    = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"}
	nonResourceVerbs = []string{"get", "head", "options", "post", "put", "patch", "delete", "*"}
)

// policyAuthorizer grants what its rules allow and denies the rest.
type policyAuthorizer struct {
	path  string
	rules []PolicyRule
}

// loadPolicyFile reads and checks --authorization-policy-file: a YAML or
// JSON list of PolicyRule. Every problem is reported, naming the rule.
func loadPolicyFile(path string) (*policyAuthorizer, []error) {
	wrap := func(err error) error { return fmt.Errorf("--authorization-policy-file=%s: %w", path, err) }
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []error{wrap(err)}
	}
	rules, errs := parsePolicy(data)
	for i := range errs {
		errs[i] = wrap(errs[i])
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &policyAuthorizer{path: path, rules: rules}, nil
}

func parsePolicy(data []byte) ([]PolicyRule, []error) {
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return nil, []error{err}
	}
	// Decoding rule by rule names the rule an unknown field is in: a
	// misspelt "verb:" must not pass for a rule granting nothing.
	var raw []json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, []error{fmt.Errorf("want a list of rules: %w", err)}
	}
	if len(raw) == 0 {
		return nil, []error{errors.New("no rules: the file grants nothing; leave the flag out for that")}
	}
	var errs []error
	rules := make([]PolicyRule, len(raw))
	for i, r := range raw {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rules[i]); err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i+1, err))
			continue
		}
		for _, err := range rules[i].validate() {
			errs = append(errs, fmt.Errorf("rule %d: %w", i+1, err))
		}
	}
	return rules, errs
}

func (r *PolicyRule) validate() []error {
	var errs []error
	switch {
	case r.User == "" && r.Group == "":
		errs = append(errs, errors.New("names no user and no group: set exactly one"))
	case r.User != "" && r.Group != "":
		errs = append(errs, errors.New("names both a user and a group: set exactly one"))
	}
	if len(r.Verbs) == 0 {
		errs = append(errs, errors.New("verbs is empty"))
	}
	resourceRule := len(r.APIGroups) > 0 || len(r.Resources) > 0 || len(r.Namespaces) > 0
	known := resourceVerbs
	switch {
	case resourceRule && len(r.NonResourceURLs) > 0:
		errs = append(errs, errors.New("mixes nonResourceURLs with apiGroups, resources or namespaces: write two rules"))
	case len(r.NonResourceURLs) > 0:
		known = nonResourceVerbs
		for _, u := range r.NonResourceURLs {
			if !strings.HasPrefix(u, "/") && u != "*" {
				errs = append(errs, fmt.Errorf("nonResourceURL %q: must start with \"/\" (or be \"*\")", u))
			}
		}
	default:
		if len(r.APIGroups) == 0 {
			errs = append(errs, errors.New(`apiGroups is empty: name the groups ("*" for every group, "" for the core group)`))
		}
		if len(r.Resources) == 0 {
			errs = append(errs, errors.New(`resources is empty: name the resources ("*" for every resource), or give nonResourceURLs`))
		}
		for _, res := range r.Resources {
			if res == "" || strings.Count(res, "/") > 1 {
				errs = append(errs, fmt.Errorf("resource %q: want a resource, resource/subresource, or \"*\"", res))
			}
		}
		for _, ns := range r.Namespaces {
			if ns == "" {
				errs = append(errs, errors.New(`an empty namespace: leave namespaces out (or use "*") for every namespace`))
			}
		}
	}
	for _, v := range r.Verbs {
		if !slices.Contains(known, v) {
			errs = append(errs, fmt.Errorf("unknown verb %q: known verbs are %s", v, strings.Join(known, ", ")))
		}
	}
	return errs
}

// Authorize allows a request some rule grants; anything else is denied,
// with a reason that says what was asked and where the grants live.
func (p *policyAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionDeny, "no user", nil
	}
	for i := range p.rules {
		if p.rules[i].matches(a) {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionDeny, fmt.Sprintf("no rule of --authorization-policy-file grants user %q (groups %q) %s",
		u.GetName(), u.GetGroups(), describeRequest(a)), nil
}

// ConditionsAwareAuthorize: the rules carry no conditions, so the decision
// is Authorize's, as the interface asks of authorizers without them.
func (p *policyAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(p.Authorize(ctx, a))
}

// EvaluateConditions fails closed: this authorizer never hands out a
// conditional decision to evaluate.
func (p *policyAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

var _ authorizer.Authorizer = (*policyAuthorizer)(nil)

func describeRequest(a authorizer.Attributes) string {
	if !a.IsResourceRequest() {
		return fmt.Sprintf("%s on %s", a.GetVerb(), a.GetPath())
	}
	res := a.GetResource()
	if a.GetSubresource() != "" {
		res += "/" + a.GetSubresource()
	}
	if a.GetAPIGroup() != "" {
		res += "." + a.GetAPIGroup()
	}
	if a.GetNamespace() == "" {
		return fmt.Sprintf("%s on %s (cluster-wide)", a.GetVerb(), res)
	}
	return fmt.Sprintf("%s on %s in namespace %q", a.GetVerb(), res, a.GetNamespace())
}

func (r *PolicyRule) matches(a authorizer.Attributes) bool {
	u := a.GetUser()
	if r.User != "" && r.User != u.GetName() {
		return false
	}
	if r.Group != "" && !slices.Contains(u.GetGroups(), r.Group) {
		return false
	}
	if !anyOrContains(r.Verbs, a.GetVerb()) {
		return false
	}
	if !a.IsResourceRequest() {
		return r.nonResourceURLMatches(a.GetPath())
	}
	if len(r.Resources) == 0 || !anyOrContains(r.APIGroups, a.GetAPIGroup()) || !r.resourceMatches(a.GetResource(), a.GetSubresource()) {
		return false
	}
	return len(r.Namespaces) == 0 || slices.Contains(r.Namespaces, "*") ||
		(a.GetNamespace() != "" && slices.Contains(r.Namespaces, a.GetNamespace()))
}

func (r *PolicyRule) resourceMatches(resource, subresource string) bool {
	full := resource
	if subresource != "" {
		full += "/" + subresource
	}
	for _, res := range r.Resources {
		switch {
		case res == "*", res == full:
			return true
		case subresource != "" && (res == resource+"/*" || res == "*/"+subresource):
			return true
		}
	}
	return false
}

func (r *PolicyRule) nonResourceURLMatches(path string) bool {
	for _, u := range r.NonResourceURLs {
		switch {
		case u == "*", u == path:
			return true
		case strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimSuffix(u, "*")):
			return true
		}
	}
	return false
}

func anyOrContains(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}
