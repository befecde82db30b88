package main

import (
	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/campaign"
)

// addRequestFlags declares what every request carries besides its
// prompt: extra body fields, headers, a system prompt, the output-length
// field.
func addRequestFlags(cmd *kingpin.CmdClause, s *campaign.Settings) {
	d := campaign.DefaultSettings()
	cmd.Flag("request.extra-body", `JSON object merged into every request body (sampling parameters, seed, chat_template_kwargs, vendor fields), or =@FILE holding one (with '=': a separate @FILE argument is read as a file of arguments); repeatable (a field given twice is refused). E.g. '{"temperature":0,"seed":1}'. Recorded in runs[].settings.request and the settings hash.`).
		PlaceHolder("JSON|@FILE").StringsVar(&s.ExtraBody)
	cmd.Flag("request.header", "Header sent with every request, 'Name: value'; repeatable. A secret one's value (Authorization, api-key, any name with auth, token, key, secret, password, cookie, session or signature, or named by --request.secret-header) is never written to a report or log.").
		PlaceHolder("'NAME: VALUE'").StringsVar(&s.Headers)
	cmd.Flag("request.secret-header", "Name of a --request.header whose value is secret too (never reported); repeatable.").PlaceHolder("NAME").StringsVar(&s.SecretHeaders)
	cmd.Flag("request.system-prompt", "System prompt sent with every request (chat: a system message; completions: before the prompt and a blank line), or =@FILE holding it.").PlaceHolder("TEXT|@FILE").StringVar(&s.SystemPrompt)
	cmd.Flag("request.system-prompt-tokens", "Instead of --request.system-prompt: a generated system prompt of this many of the server's tokens (sized by --input-tokens.calibrate). 0: none.").Default("0").IntVar(&s.SystemPromptTokens)
	cmd.Flag("request.max-tokens-field", "Body field of each request's output length: max_tokens, max_completion_tokens (OpenAI's reasoning models take only it) or auto (max_completion_tokens for the chat API of api.openai.com and Azure OpenAI, else max_tokens).").
		Default(d.MaxTokensField).EnumVar(&s.MaxTokensField, campaign.Choices("MaxTokensField")...)
}
