package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

var update = flag.Bool("update", false, "rewrite testdata/compare.* from the renderers")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

func TestCompareTextGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCompareText(&b, sampleComparison()); err != nil {
		t.Fatal(err)
	}
	golden(t, "compare.txt", b.Bytes())
}

func TestCompareJSONGolden(t *testing.T) {
	c := sampleComparison()
	var b bytes.Buffer
	if err := WriteCompareJSON(&b, c); err != nil {
		t.Fatal(err)
	}
	golden(t, "compare.json", b.Bytes())
	// It reads back into the same comparison.
	var back Comparison
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, c) {
		t.Errorf("round trip differs:\n%+v\n%+v", back, *c)
	}
}

// TestCompareHTML: a well-formed, self-contained page in the report's
// style; every figure of every pair a row of its verdict's class; all text
// escaped.
func TestCompareHTML(t *testing.T) {
	t.Parallel()
	c := sampleComparison()
	var b bytes.Buffer
	if err := WriteCompareHTML(&b, c); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	z := html.NewTokenizer(strings.NewReader(page))
	var stack []string
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			if !errors.Is(z.Err(), io.EOF) {
				t.Fatalf("tokenizer: %v", z.Err())
			}
			break
		}
		name, _ := z.TagName()
		switch tt {
		case html.StartTagToken:
			if !voidElements[string(name)] {
				stack = append(stack, string(name))
			}
		case html.EndTagToken:
			if len(stack) == 0 || stack[len(stack)-1] != string(name) {
				t.Fatalf("</%s> closes %v", name, stack)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements %v", stack)
	}

	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // device/figure → class
	var walk func(n *html.Node, dev string)
	walk = func(n *html.Node, dev string) {
		if n.Type == html.ElementNode {
			attr := map[string]string{}
			for _, a := range n.Attr {
				attr[a.Key] = a.Val
			}
			if d, ok := attr["data-device"]; ok {
				dev = d
			}
			if f, ok := attr["data-figure"]; ok {
				if _, dup := rows[dev+"/"+f]; dup {
					t.Errorf("%s/%s twice", dev, f)
				}
				rows[dev+"/"+f] = attr["class"]
			}
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch, dev)
		}
	}
	walk(doc, "")
	n := 0
	for _, dc := range c.Comparisons[0].Devices {
		for _, f := range dc.Figures {
			n++
			if got := rows[dc.Baseline.Label+"/"+f.ID]; got != string(f.Verdict) {
				t.Errorf("%s/%s: row class %q, want %s", dc.Baseline.Label, f.ID, got, f.Verdict)
			}
		}
	}
	if len(rows) != n || n != 14 {
		t.Errorf("%d rows, %d figures, want 14", len(rows), n)
	}
	if rows["CUDA 0/fp32_flops"] != "worse" || rows["CUDA 1/fp32_flops"] != "better" || rows["CUDA 0/launch_latency_seconds"] != "inconclusive" {
		t.Errorf("rows %v", rows)
	}
	for _, want := range []string{
		"<title>GPU host comparison</title>",
		`<div class="verdict worse" id="verdict">WORSE: 4 worse, 2 better, 2 same, 2 inconclusive, 4 missing; 1 GPU(s) unmatched (exit 1)</div>`,
		"Only in this report</th><td>CUDA 0 · &lt;b&gt;H100&lt;/b&gt; &amp; &#34;co&#34; · GPU-99999999",
		"Some of these reports were made on simulated GPUs",
		"The same host: GPUs matched by UUID",
		`<td class="n">60.1 TFLOP/s</td>`,
		`<td class="n">-75 %</td>`,
		`title="60.1 TFLOP/s → 15 TFLOP/s (-75 %), beyond the tolerance of 3 TFLOP/s;`,
		"--pass: #1a7f37", // the report's style
		"comparison schema version 1",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, banned := range []string{"<b>H100", "<script", "http://", "https://", "<link", "src=", "@import"} {
		if strings.Contains(page, banned) {
			t.Errorf("page contains %q", banned)
		}
	}
}

// TestReportHTMLKeepsItsStyle: the report's page still carries the shared
// style, once.
func TestReportHTMLKeepsItsStyle(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteHTML(&b, sampleReport(t)); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "<style>"); n != 1 || !strings.Contains(b.String(), "tr.fail td.st, .verdict.fail") {
		t.Errorf("%d style elements", n)
	}
}

// TestWriteCompareFile: written atomically, in every format.
func TestWriteCompareFile(t *testing.T) {
	t.Parallel()
	c := sampleComparison()
	dir := t.TempDir()
	for name, render := range map[string]func(io.Writer, *Comparison) error{"c.json": WriteCompareJSON, "c.html": WriteCompareHTML, "c.txt": WriteCompareText} {
		p := filepath.Join(dir, name)
		if err := WriteCompareFile(p, c, render); err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := render(&want, c); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s: %v, %d bytes, want %d", name, err, len(got), want.Len())
		}
	}
	if err := WriteCompareFile(filepath.Join(dir, "no-such", "c.json"), c, WriteCompareJSON); err == nil || !strings.Contains(err.Error(), "no-such") {
		t.Errorf("missing folder: %v", err)
	}
}
