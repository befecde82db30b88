package main

import (
	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/loadgen/campaign"
)

// addEvalFlags declares the flags of what an evaluation campaign records
// beyond latency and throughput (docs/loadgen.md): the GPU side of every
// run, the manifest and the saved responses.
func addEvalFlags(cmd *kingpin.CmdClause, f *loadFlags) {
	d := campaign.DefaultSettings()
	cliflag.Duration(cmd, "exporter.poll-interval", "With --exporter.url: how often to read the exporter during a run (besides at its start and end).", d.ExporterInterval.String(), &f.set.ExporterInterval)
	cmd.Flag("exporter.gpus", "With --exporter.url: only the GPUs serving the model, by index or UUID, comma-separated, e.g. 0,1. Default (unset): every GPU the exporter reports.").PlaceHolder("LIST").StringVar(&f.set.ExporterGPUs)
	cmd.Flag("label", "A key=value label recorded in the report's manifest (container image digest, framework version, evaluation code commit…); repeatable.").PlaceHolder("KEY=VALUE").StringsVar(&f.set.Labels)
	cmd.Flag("server-info", "After the last run, ask the server what it is (vLLM /version, TGI /info, llama.cpp /props, Ollama /api/version, /api/show and /api/tags, SGLang /get_server_info, /v1/models) and record the answers in the manifest (--no-server-info: do not ask).").Default("true").BoolVar(&f.set.ServerInfo)
	cliflag.Duration(cmd, "server-info.timeout", "How long to wait for each of the server's answers (asked all at once).", d.ServerInfoTimeout.String(), &f.set.ServerInfoTimeout)
	cmd.Flag("save-responses", "Write one JSON line per measured request with the server's full response text, finish reason and token counts, the prompt's SHA-256 and the dataset row's id and reference, for scoring apart from timing.").PlaceHolder("FILE.jsonl").StringVar(&f.saveResponses)
	cmd.Flag("save-responses.prompts", "With --save-responses: also write each prompt's text (by default only its SHA-256).").BoolVar(&f.set.ResponsePrompts)
}
