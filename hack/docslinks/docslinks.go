// Package docslinks checks the relative links of Markdown pages: each must
// name a file or folder that exists, and an anchor into a Markdown page must
// name one of its headings (GitHub's heading ids). Its test runs it over
// README.md and docs/*.md, so make test fails on a dead link.
package docslinks

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Problem is one dead link.
type Problem struct {
	File   string // the page, as given to Check
	Line   int
	Target string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

var (
	// [text](target) and ![alt](target), with an optional "title".
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// [label]: target
	refDefinition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// src="..." and href="..." of inline HTML.
	htmlAttr   = regexp.MustCompile(`\b(?:src|href)="([^"]+)"`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	heading    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	fenceStart = regexp.MustCompile("^\\s{0,3}(```+|~~~+)")
	// [text](target) inside a heading: its id keeps the text.
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// Check reads each page (paths relative to root) and returns every relative
// link that does not resolve. Links with a scheme (https:, mailto:) are not
// followed.
func Check(root string, pages []string) ([]Problem, error) {
	anchors := map[string]map[string]bool{} // page path -> heading ids
	idsOf := func(path string) (map[string]bool, error) {
		if ids, ok := anchors[path]; ok {
			return ids, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		ids := headingIDs(string(data))
		anchors[path] = ids
		return ids, nil
	}
	var problems []Problem
	for _, page := range pages {
		full := filepath.Join(root, page)
		data, err := os.ReadFile(full)
		if err != nil {
			return nil, err
		}
		for _, l := range links(string(data)) {
			if reason := resolve(full, l.target, idsOf); reason != "" {
				problems = append(problems, Problem{File: page, Line: l.line, Target: l.target, Reason: reason})
			}
		}
	}
	return problems, nil
}

// resolve says why target, linked from page, is dead; "" when it is live.
func resolve(page, target string, idsOf func(string) (map[string]bool, error)) string {
	u, err := url.Parse(target)
	if err != nil {
		return "not a URL: " + err.Error()
	}
	if u.Scheme != "" || u.Host != "" {
		return ""
	}
	path := page
	if u.Path != "" {
		if strings.HasPrefix(u.Path, "/") {
			return "absolute path: links must be relative to the page"
		}
		path = filepath.Join(filepath.Dir(page), filepath.FromSlash(u.Path))
		if _, err := os.Stat(path); err != nil {
			return "no such file or folder"
		}
	}
	if u.Fragment == "" || !strings.HasSuffix(path, ".md") {
		return ""
	}
	ids, err := idsOf(path)
	if err != nil {
		return err.Error()
	}
	if !ids[u.Fragment] {
		return "no heading with id #" + u.Fragment
	}
	return ""
}

type link struct {
	line   int
	target string
}

// links lists the link targets of a Markdown page outside code blocks and
// code spans.
func links(doc string) []link {
	var out []link
	for _, l := range proseLines(doc) {
		text := codeSpan.ReplaceAllString(l.text, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		if m := refDefinition.FindStringSubmatch(text); m != nil {
			targets = append(targets, m[1])
		}
		for _, m := range htmlAttr.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			out = append(out, link{line: l.number, target: t})
		}
	}
	return out
}

type line struct {
	number int
	text   string
}

// proseLines returns the lines of a page outside fenced code blocks.
func proseLines(doc string) []line {
	var out []line
	fence := ""
	for i, text := range strings.Split(doc, "\n") {
		if m := fenceStart.FindStringSubmatch(text); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case strings.HasPrefix(m[1], fence):
				fence = ""
			}
			continue
		}
		if fence == "" {
			out = append(out, line{number: i + 1, text: text})
		}
	}
	return out
}

// headingIDs returns the ids GitHub gives a page's headings: lower case,
// punctuation dropped, spaces made hyphens, a repeated id suffixed -1, -2...
func headingIDs(doc string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(doc) {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		id := slug(m[2])
		if n := seen[id]; n > 0 {
			seen[id]++
			id = fmt.Sprintf("%s-%d", id, n)
		} else {
			seen[id] = 1
		}
		ids[id] = true
	}
	return ids
}

func slug(title string) string {
	// Links and code marks in a heading count by their text.
	title = headingLink.ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
