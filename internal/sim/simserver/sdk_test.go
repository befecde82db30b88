package simserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestOpenAISDK checks that the official Go SDK accepts the simulator's
// responses, streaming and not, for chat and text completions.
func TestOpenAISDK(t *testing.T) {
	t.Parallel()
	for _, roleChunk := range []bool{true, false} {
		_, url := startServer(t, Config{Seed: 9, FixedTTFT: time.Millisecond, FixedITL: 200 * time.Microsecond, TokensPerChunk: 2, RoleChunk: roleChunk})
		client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		chatParams := openai.ChatCompletionNewParams{
			Model:     "gpulens-sim",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("say seven words to me")},
			MaxTokens: openai.Int(9),
		}

		comp, err := client.Chat.Completions.New(ctx, chatParams)
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		if comp.Usage.PromptTokens != 7 || comp.Usage.CompletionTokens != int64(len(strings.Fields(comp.Choices[0].Message.Content))) ||
			comp.Usage.TotalTokens != 7+comp.Usage.CompletionTokens || comp.Model != "gpulens-sim" || comp.Choices[0].Message.Role != "assistant" {
			t.Errorf("chat completion: %+v", comp)
		}

		streamParams := chatParams
		streamParams.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, streamParams)
		acc := openai.ChatCompletionAccumulator{}
		chunks := 0
		for stream.Next() {
			chunks++
			if !acc.AddChunk(stream.Current()) {
				t.Errorf("accumulator rejected chunk %d", chunks)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("chat stream (role chunk %v): %v", roleChunk, err)
		}
		got := acc.Choices[0].Message.Content
		if acc.Usage.CompletionTokens != int64(len(strings.Fields(got))) || acc.Usage.PromptTokens != 7 || got == "" {
			t.Errorf("streamed chat: content %q usage %+v", got, acc.Usage)
		}
		if acc.Choices[0].FinishReason == "" {
			t.Errorf("streamed chat: no finish_reason")
		}

		tc, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model: "gpulens-sim", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("one two")},
			MaxTokens: openai.Int(4),
		})
		if err != nil {
			t.Fatalf("completion: %v", err)
		}
		if tc.Usage.PromptTokens != 2 || tc.Usage.CompletionTokens != int64(len(strings.Fields(tc.Choices[0].Text))) {
			t.Errorf("completion: %+v", tc)
		}

		ts := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
			Model: "gpulens-sim", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("one two")},
			MaxTokens: openai.Int(6), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var text strings.Builder
		var usage int64
		for ts.Next() {
			c := ts.Current()
			for _, ch := range c.Choices {
				text.WriteString(ch.Text)
			}
			if c.Usage.CompletionTokens > 0 {
				usage = c.Usage.CompletionTokens
			}
		}
		if err := ts.Err(); err != nil {
			t.Fatalf("completion stream: %v", err)
		}
		if n := int64(len(strings.Fields(text.String()))); n == 0 || n != usage {
			t.Errorf("streamed completion %q: %d words, usage %d", text.String(), n, usage)
		}

		_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "nope", Messages: chatParams.Messages})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Errorf("unknown model: %v, want a 404 model_not_found API error", err)
		}
	}
}
