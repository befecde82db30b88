package campaign

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// TestSaveResponses: every measured request's answer is kept with its
// dataset row, id and reference, the prompt's hash (and text, when
// asked), the finish reason and the counts; a failed request keeps its
// error class.
func TestSaveResponses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "qa.jsonl")
	var rows strings.Builder
	for k := 1; k <= 3; k++ {
		fmt.Fprintf(&rows, `{"prompt":"q%d what","id":"id%d","reference":{"a":%d}}`+"\n", k, k, k)
	}
	if err := os.WriteFile(path, []byte(rows.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := workload.LoadDataset(path)
	if err != nil {
		t.Fatal(err)
	}
	// The server answers "answer to qK" (the prompt's first word), or
	// HTTP 500 for q3.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		first, _, _ := strings.Cut(body.Messages[0].Content, " ")
		if first == "q3" {
			http.Error(w, `{"error":{"message":"down"}}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"answer to \"}}]}\n\n")
		fmt.Fprintf(w, "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":%q},\"finish_reason\":\"stop\"}]}\n\n", first)
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
	})
	for _, keepPrompt := range []bool{false, true} {
		o := options(t, h)
		o.Workload.Dataset, o.Prompts, o.Run.Requests = d, report.PromptsReuse, 6
		o.SaveResponses, o.ResponsePrompts = true, keepPrompt
		res := run(t, Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{2}, Repeats: 1}, o, nil)
		if len(res.Responses) != 6 {
			t.Fatalf("%d responses, want 6", len(res.Responses))
		}
		for i, x := range res.Responses {
			k := x.DatasetRow
			prompt := fmt.Sprintf("q%d what", k)
			sum := sha256.Sum256([]byte(prompt))
			want := report.Record{Run: "concurrency=2", Level: 2, Repeat: 1, Index: i, PromptTokens: 2, OutputTokens: 3,
				Answer: &report.Answer{DatasetRow: k, ID: fmt.Sprintf("id%d", k),
					Reference: json.RawMessage(fmt.Sprintf(`{"a":%d}`, k)), PromptSHA256: hex.EncodeToString(sum[:]),
					Response: fmt.Sprintf("answer to q%d", k), FinishReason: "stop"}}
			if keepPrompt {
				want.Prompt = prompt
			}
			if k == 3 {
				// Failed: nothing said, nothing counted.
				want.Response, want.FinishReason, want.PromptTokens, want.OutputTokens, want.ErrorClass = "", "", 0, 0, report.ErrHTTP5xx
			}
			var got, exp strings.Builder
			if err := report.WriteResponses(&got, []report.Record{x}); err != nil {
				t.Fatal(err)
			}
			if err := report.WriteResponses(&exp, []report.Record{want}); err != nil {
				t.Fatal(err)
			}
			if got.String() != exp.String() {
				t.Errorf("response %d:\n got %s\nwant %s", i, got.String(), exp.String())
			}
		}
	}
	// Without SaveResponses nothing is kept.
	o := options(t, h)
	o.Workload.Dataset, o.Prompts = d, report.PromptsReuse
	if res := run(t, Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 1}, o, nil); res.Responses != nil {
		t.Errorf("%d responses kept unasked", len(res.Responses))
	}
}
