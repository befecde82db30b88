package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Answer is what the server answered to one measured request, for an
// evaluation harness to score apart from the timing: optional text on the
// request's Record (Record.Answer, kept when responses are saved), written
// with the record's name and outcome as one line of the saved-responses
// file (WriteResponses; docs/loadgen.md, "Saved responses"). Nothing here
// is scored.
type Answer struct {
	// DatasetRow is where the prompt is in the dataset file: its line
	// (JSONL) or its position in the array (ShareGPT), counted from 1; 0
	// (absent) for synthetic prompts. ID and Reference are the dataset
	// row's "id" and "reference" (or "expected") fields, copied through.
	DatasetRow int             `json:"dataset_row,omitempty"`
	ID         string          `json:"id,omitempty"`
	Reference  json.RawMessage `json:"reference,omitempty"`
	// PromptSHA256 is the hex SHA-256 of the prompt exactly as sent (with
	// its leading tag when prompts are distinct); Prompt is its text, when
	// asked for.
	PromptSHA256 string `json:"prompt_sha256"`
	Prompt       string `json:"prompt,omitempty"`
	// Response is the generated text (content, or text for completions);
	// Reasoning the reasoning text a server streamed apart from it
	// (reasoning_content, reasoning).
	Response     string `json:"response"`
	Reasoning    string `json:"reasoning,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
}

// responseLine is one line of the saved-responses file: the record's run,
// index and outcome around its Answer. The layout is the file's format
// (docs/loadgen.md), unchanged since the file was first written.
type responseLine struct {
	Run    string  `json:"run"`
	Level  float64 `json:"level"`
	Repeat int     `json:"repeat"`
	Index  int     `json:"index"`
	*Answer
	PromptTokens    int    `json:"prompt_tokens"`
	OutputTokens    int    `json:"output_tokens"`
	ReasoningTokens int    `json:"reasoning_tokens,omitempty"`
	TokensEstimated bool   `json:"tokens_estimated,omitempty"`
	ErrorClass      string `json:"error_class,omitempty"`
}

// WriteResponses writes the answer of every record that has one, one per
// line as JSON, HTML characters unescaped: the record's Run, Level,
// Repeat, Index, token counts and error class with its Answer.
func WriteResponses(w io.Writer, recs []Record) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range recs {
		r := &recs[i]
		if r.Answer == nil {
			continue
		}
		line := responseLine{Run: r.Run, Level: r.Level, Repeat: r.Repeat, Index: r.Index, Answer: r.Answer,
			PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens, ReasoningTokens: r.ReasoningTokens, TokensEstimated: r.TokensEstimated,
			ErrorClass: r.ErrorClass}
		if err := enc.Encode(&line); err != nil {
			return err
		}
	}
	return nil
}

// ReadResponses reads what WriteResponses wrote: one record per line, with
// its Answer and the fields the line holds.
func ReadResponses(r io.Reader) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 256<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		x := responseLine{Answer: &Answer{}}
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return recs, fmt.Errorf("response on line %d: %w", line, err)
		}
		recs = append(recs, Record{Run: x.Run, Level: x.Level, Repeat: x.Repeat, Index: x.Index, Answer: x.Answer,
			PromptTokens: x.PromptTokens, OutputTokens: x.OutputTokens, ReasoningTokens: x.ReasoningTokens, TokensEstimated: x.TokensEstimated,
			ErrorClass: x.ErrorClass})
	}
	return recs, sc.Err()
}
