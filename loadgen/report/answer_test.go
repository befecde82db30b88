package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestResponsesRoundTrip(t *testing.T) {
	rs := []Record{
		{Run: "concurrency=1", Level: 1, Repeat: 1, Index: 0, PromptTokens: 4, OutputTokens: 5, Answer: &Answer{DatasetRow: 3, ID: "q3", Reference: json.RawMessage(`{"a":[1,2]}`),
			PromptSHA256: "ab", Prompt: "<b>x</b>", Response: "é & <tag>\n", FinishReason: "stop"}},
		{Run: "concurrency=1", Level: 1, Repeat: 1, Index: 1, ErrorClass: ErrHTTP5xx, Answer: &Answer{PromptSHA256: "cd"}},
	}
	var buf bytes.Buffer
	// A record without an answer (responses not kept for it) has no line.
	if err := WriteResponses(&buf, append(rs[:1:1], Record{Index: 7}, rs[1])); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"response":"é & <tag>\n"`) || !strings.Contains(lines[0], `"reference":{"a":[1,2]}`) ||
		lines[1] != `{"run":"concurrency=1","level":1,"repeat":1,"index":1,"prompt_sha256":"cd","response":"","prompt_tokens":0,"output_tokens":0,"error_class":"http_5xx"}` {
		t.Errorf("written:\n%s", buf.String())
	}
	back, err := ReadResponses(strings.NewReader(buf.String() + "\n"))
	if err != nil || !reflect.DeepEqual(back, rs) {
		t.Errorf("read back %+v, %v", back, err)
	}
	if _, err := ReadResponses(strings.NewReader(lines[0] + "\n{bad\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: %v", err)
	}
}
