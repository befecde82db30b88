package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/client"
)

// requestFlags are what every request carries besides its prompt: extra
// body fields, headers, a system prompt, the output-length field.
type requestFlags struct {
	extraBody     []string
	headers       []string
	secretHeaders []string
	system        string
	systemTokens  int
	maxField      string
}

func addRequestFlags(cmd *kingpin.CmdClause) *requestFlags {
	f := &requestFlags{}
	cmd.Flag("request.extra-body", `JSON object merged into every request body (sampling parameters, seed, chat_template_kwargs, vendor fields), or =@FILE holding one (with '=': a separate @FILE argument is read as a file of arguments); repeatable (a field given twice is refused). E.g. '{"temperature":0,"seed":1}'. Recorded in runs[].settings.request and the settings hash.`).
		PlaceHolder("JSON|@FILE").StringsVar(&f.extraBody)
	cmd.Flag("request.header", "Header sent with every request, 'Name: value'; repeatable. A secret one's value (Authorization, api-key, any name with auth, token, key, secret, password, cookie, session or signature, or named by --request.secret-header) is never written to a report or log.").
		PlaceHolder("'NAME: VALUE'").StringsVar(&f.headers)
	cmd.Flag("request.secret-header", "Name of a --request.header whose value is secret too (never reported); repeatable.").PlaceHolder("NAME").StringsVar(&f.secretHeaders)
	cmd.Flag("request.system-prompt", "System prompt sent with every request (chat: a system message; completions: before the prompt and a blank line), or =@FILE holding it.").PlaceHolder("TEXT|@FILE").StringVar(&f.system)
	cmd.Flag("request.system-prompt-tokens", "Instead of --request.system-prompt: a generated system prompt of this many of the server's tokens (sized by --input-tokens.calibrate). 0: none.").Default("0").IntVar(&f.systemTokens)
	cmd.Flag("request.max-tokens-field", "Body field of each request's output length: max_tokens, max_completion_tokens (OpenAI's reasoning models take only it) or auto (max_completion_tokens for the chat API of api.openai.com and Azure OpenAI, else max_tokens).").
		Default(client.MaxTokensAuto).EnumVar(&f.maxField, client.MaxTokensAuto, client.FieldMaxTokens, client.FieldMaxCompletionTokens)
	return f
}

// apply sets o's request options (o.Client is set already).
func (f *requestFlags) apply(o *campaign.Options) error {
	body, err := mergeExtraBodies(f.extraBody)
	if err != nil {
		return err
	}
	o.Client.ExtraBody, o.Client.MaxTokensField = body, f.maxField
	secret := map[string]bool{}
	for _, n := range f.secretHeaders {
		secret[http.CanonicalHeaderKey(strings.TrimSpace(n))] = true
	}
	named := map[string]bool{}
	for _, s := range f.headers {
		h, err := client.ParseHeader(s)
		if err != nil {
			return fmt.Errorf("--request.header %w", err)
		}
		canon := http.CanonicalHeaderKey(h.Name)
		h.Secret, named[canon] = secret[canon], true
		o.Client.Headers = append(o.Client.Headers, h)
	}
	for _, n := range f.secretHeaders {
		if !named[http.CanonicalHeaderKey(strings.TrimSpace(n))] {
			return fmt.Errorf("--request.secret-header %q: no --request.header of that name", n)
		}
	}
	if o.SystemPrompt, err = textOrFile("--request.system-prompt", f.system); err != nil {
		return err
	}
	o.SystemPromptTokens = f.systemTokens
	return nil
}

// textOrFile is s, or the content of the file @s names.
func textOrFile(flag, s string) (string, error) {
	path, ok := strings.CutPrefix(s, "@")
	if !ok {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return string(b), nil
}

// mergeExtraBodies merges the --request.extra-body objects into one.
func mergeExtraBodies(specs []string) (json.RawMessage, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	all := map[string]json.RawMessage{}
	for _, s := range specs {
		text, err := textOrFile("--request.extra-body", s)
		if err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		dec := json.NewDecoder(strings.NewReader(text))
		if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
			if err == nil {
				err = fmt.Errorf("not one JSON object")
			}
			return nil, fmt.Errorf("--request.extra-body %s: want one JSON object: %v", quoteShort(s), err)
		}
		for k, v := range m {
			if _, dup := all[k]; dup {
				return nil, fmt.Errorf("--request.extra-body: field %q given twice", k)
			}
			var c bytes.Buffer
			_ = json.Compact(&c, v)
			all[k] = c.Bytes()
		}
	}
	return json.Marshal(all)
}

// quoteShort quotes s, cut to 80 bytes.
func quoteShort(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return fmt.Sprintf("%q", s)
}
