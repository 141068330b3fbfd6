// weir's subcommands. Each takes the arguments after its name and returns the
// process exit code; weir::Error and UsageError are handled by main.
#pragma once

namespace weir::tools {

int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_embed(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_imatrix(int argc, char** argv);
int cmd_bench(int argc, char** argv);

}  // namespace weir::tools
