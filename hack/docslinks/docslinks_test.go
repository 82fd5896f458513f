package docslinks

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDocsLinks fails on a relative link of README.md or docs/*.md that
// names a missing file or heading.
func TestDocsLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, rel)
	}
	if len(pages) < 2 {
		t.Fatalf("found no docs/*.md under %s", root)
	}
	problems, err := Check(root, pages)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("dead link: %s", p)
	}
}

// TestCheckReportsDeadLinks makes sure the checker can fail: every kind of
// dead link in a page of its own is reported, and no live one.
func TestCheckReportsDeadLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/other.md", "# Other page\n\n## What `make run` does\n\n## Twice\n\n## Twice\n")
	write("docs/img.png", "png")
	write("README.md", `# Title

[live](docs/other.md) [live anchor](docs/other.md#what-make-run-does) [second twice](docs/other.md#twice-1)
![live image](docs/img.png) [folder](docs/) [web](https://example.com/missing) [here](#title)
[dead](docs/missing.md) [dead anchor](docs/other.md#nowhere)
<img src="docs/gone.png">
`+"`[not a link](docs/in-code-span.md)`"+`
`+"```"+`
[in a fence](docs/in-fence.md)
`+"```"+`
[ref]: docs/ref-missing.md
[abs](/etc/passwd) [dead here](#no-such-heading)
`)
	problems, err := Check(root, []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Target)
		if p.File != "README.md" || p.Line < 5 {
			t.Errorf("problem with a wrong place: %s", p)
		}
	}
	want := []string{"docs/missing.md", "docs/other.md#nowhere", "docs/gone.png", "docs/ref-missing.md", "/etc/passwd", "#no-such-heading"}
	if !slices.Equal(got, want) {
		t.Errorf("dead links reported %q, want %q", got, want)
	}
}
