"""weir: GGUF language models on CPUs and NVIDIA GPUs, from Python.

The API has the shape llama-cpp-python's users know::

    from weir import Llama
    llm = Llama("gemma-3-270m-q4_k_m.gguf", n_ctx=2048)
    out = llm("The capital of France is", max_tokens=16, temperature=0)
    print(out["choices"][0]["text"])

Completions and chat completions return the same objects as the OpenAI API
(and weir serve): dicts whole, or an iterator of chunks with stream=True.
The engine runs with the GIL released; Ctrl-C stops a generation (the
KeyboardInterrupt comes within a tenth of a second).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _weir
from ._weir import WeirError
from .llama_speculative import LlamaPromptLookupDecoding

__all__ = ["Llama", "LlamaPromptLookupDecoding", "WeirError", "__version__"]
__version__ = "0.5.0"

_POLL_SECONDS = 0.1  # how long one wait holds before Python checks for Ctrl-C

Stop = Union[str, Sequence[str], None]


_INT32_MAX = 2**31 - 1


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    """An int argument within [lo, hi] (what the engine's C types hold):
    TypeError for another type, ValueError naming the argument otherwise."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name}: expected {lo} to {hi}, got {value}")


def _output_fields(body: Dict[str, Any], grammar: Optional[str], logit_bias: Optional[Dict[int, float]],
                   json_schema: Optional[Dict[str, Any]] = None,
                   response_format: Optional[Dict[str, Any]] = None) -> None:
    """The fields that shape the output, as weir serve takes them."""
    if grammar is not None:
        if not isinstance(grammar, str):
            grammar = getattr(grammar, "grammar", None) or getattr(grammar, "_grammar", None)
            if not isinstance(grammar, str):
                raise TypeError("grammar: a GBNF grammar as a string")
        body["grammar"] = grammar
    if json_schema is not None:
        body["json_schema"] = json_schema
    if response_format is not None:
        body["response_format"] = response_format
    if logit_bias:
        body["logit_bias"] = {str(int(k)): float(v) for k, v in logit_bias.items()}


def _choice_fields(body: Dict[str, Any], n: int, best_of: Optional[int], stream: bool) -> None:
    """n choices (best_of candidates), and whether they stream (the engine
    refuses best_of with a stream, as OpenAI's API does)."""
    _check_int("n", n, 1, 128)
    body["n"] = n
    if best_of is not None:
        _check_int("best_of", best_of, 1, 128)
        body["best_of"] = best_of
    if stream:
        body["stream"] = True


def _stop_list(stop: Stop) -> List[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    return list(stop)


class Llama:
    """A loaded GGUF model.

    model_path: the GGUF file (the first of a split model's files).
    n_ctx: KV cache cells, shared by requests that run side by side.
    n_gpu_layers: layers on the GPU (-1: all; 0: the CPU alone).
    seed: makes sampling repeatable: each call draws its seed from a
        generator started with it (None: a random start).
    n_threads: CPU threads (None: all CPUs).
    n_batch: tokens a forward step takes.
    n_parallel: requests generated side by side (calls from several Python
        threads share the engine; more wait their turn).
    chat_template: a Jinja chat template instead of the model's.
    type_k, type_v: the KV cache's type as a ggml type id, as
        llama-cpp-python takes it: 0 (f32), 1 (f16) or 8 (q8_0: about half
        of f16's memory); both the same (weir's cache has one type). None:
        f16 on a GPU, f32 on the CPU.
    n_ubatch: tokens a forward step takes (at most n_batch; weir's step is
        the smaller of the two, as llama.cpp's physical batch).
    n_threads_batch: threads for prompts; weir runs prompts and generation
        on the same threads, so None or n_threads.
    use_mmap: map the file; False reads the CPU's weights into memory.
    main_gpu: the GPU of a one-GPU run, the first of a split.
    split_mode: several GPUs: 0 / "none", 1 / "layer" (consecutive layers
        on each), 2 / "tensor" (tensor parallel over them); None: layer
        when the model does not fit one GPU.
    tensor_split: a layer split's shares of the layers per GPU.
    numa: False (off), True or 1 (distribute threads and weight rows over
        the NUMA nodes), 2 or "isolate" (only the node weir starts on).
    op_offload: prompt products of the CPU's weights on the GPU when there
        is one (None: yes).
    flash_attn: weir's attention is always fused (flash); None or True take
        it, False is refused.
    verbose: one line on stderr saying where the model runs.
    draft_model: speculative decoding, as llama-cpp-python takes it:
        LlamaPromptLookupDecoding(max_ngram_size, num_pred_tokens) (weir's,
        or llama_cpp.llama_speculative's) guesses from the text so far; the
        output stays what it is without (docs/speculative.md). Or, weir's
        addition, a draft model's GGUF path (str or os.PathLike): a smaller
        model of the same vocabulary guesses greedily for every request
        together (llama-cpp-python takes a LlamaDraftModel object instead,
        which weir refuses: TypeError). A draft of another vocabulary, or
        larger than the model, raises weir.WeirError naming the difference.
    draft_gpu_layers: the draft model's layers on the GPU (-1: all; None:
        as n_gpu_layers).

    These are the weir command's flags under llama-cpp-python's names
    (-ngl, -t, -tb, -b, -ub, -c, -ctk, --no-mmap, -mg, -sm, -ts, --numa,
    --no-op-offload, -fa): the same engine runtime takes both.
    """

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 4096,
        n_gpu_layers: int = 0,
        seed: Optional[int] = None,
        n_threads: Optional[int] = None,
        n_batch: int = 512,
        n_parallel: int = 1,
        chat_template: Optional[str] = None,
        type_k: Optional[int] = None,
        type_v: Optional[int] = None,
        n_ubatch: int = 512,
        n_threads_batch: Optional[int] = None,
        use_mmap: bool = True,
        main_gpu: int = 0,
        split_mode: Union[int, str, None] = None,
        tensor_split: Optional[Sequence[float]] = None,
        numa: Union[bool, int, str] = False,
        op_offload: Optional[bool] = None,
        flash_attn: Optional[bool] = None,
        verbose: bool = False,
        draft_model: Any = None,
        draft_gpu_layers: Optional[int] = None,
    ) -> None:
        self._model: Optional[_weir.Model] = None
        model_path = os.fspath(model_path)
        if not os.path.exists(model_path):
            raise ValueError(f"Model path does not exist: {model_path}")
        if os.path.isdir(model_path):
            raise ValueError(f"Model path is a directory, not a GGUF file: {model_path}")
        for name, value, lo, hi in (("n_ctx", n_ctx, 16, _INT32_MAX), ("n_gpu_layers", n_gpu_layers, -1, _INT32_MAX),
                                    ("n_batch", n_batch, 1, _INT32_MAX), ("n_parallel", n_parallel, 1, 256)):
            _check_int(name, value, lo, hi)
        if n_threads is not None:
            _check_int("n_threads", n_threads, 1, 1 << 16)
        kv = type_k if type_k is not None else type_v
        if type_k is not None and type_v is not None and type_k != type_v:
            raise ValueError(f"type_k ({type_k}) and type_v ({type_v}) differ; weir's KV cache has one type")
        if kv is not None and (not isinstance(kv, int) or isinstance(kv, bool) or kv not in (0, 1, 8)):
            raise ValueError(f"type_k: expected 0 (f32), 1 (f16) or 8 (q8_0), got {kv!r}")
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed: expected a non-negative int or None, got {seed!r}")
        _check_int("n_ubatch", n_ubatch, 1, _INT32_MAX)
        _check_int("main_gpu", main_gpu, 0, 1 << 16)
        if n_threads_batch is not None:
            _check_int("n_threads_batch", n_threads_batch, 1, 1 << 16)
            if n_threads_batch != (n_threads or os.cpu_count() or 1):
                raise ValueError(f"n_threads_batch ({n_threads_batch}): weir runs prompts and generation on the same "
                                 f"threads; give n_threads_batch equal to n_threads, or None")
        modes = {0: "none", 1: "layer", 2: "tensor", "none": "none", "layer": "layer", "tensor": "tensor", None: "auto"}
        if isinstance(split_mode, bool) or split_mode not in modes:
            raise ValueError(f"split_mode: expected 0 (none), 1 (layer), 2 (tensor) or None, got {split_mode!r}")
        numas = {False: "off", True: "distribute", 0: "off", 1: "distribute", 2: "isolate", "off": "off",
                 "distribute": "distribute", "isolate": "isolate"}
        if numa not in numas:
            raise ValueError(f"numa: expected False, True (distribute) or 2 / 'isolate', got {numa!r}")
        if flash_attn is False:
            raise ValueError("flash_attn=False: weir's attention always runs fused (flash attention); "
                             "leave it out or pass True")
        shares = [float(x) for x in tensor_split] if tensor_split is not None else []
        if any(not (x >= 0) for x in shares):
            raise ValueError(f"tensor_split: expected shares >= 0, got {list(tensor_split or [])!r}")
        o = _weir.ModelOptions()
        o.n_ctx = n_ctx
        o.n_gpu_layers = n_gpu_layers
        o.n_threads = n_threads or 0
        o.n_batch = n_batch
        o.n_parallel = n_parallel
        o.chat_template = chat_template or ""
        o.kv_type = -1 if kv is None else kv
        o.n_ubatch = n_ubatch
        o.n_threads_batch = n_threads_batch or 0
        o.use_mmap = bool(use_mmap)
        o.main_gpu = main_gpu
        o.split_mode = modes[split_mode]
        o.tensor_split = shares
        o.numa = numas[numa]
        o.op_offload = op_offload is None or bool(op_offload)
        if isinstance(draft_model, (str, os.PathLike)):  # a draft model's file (weir's addition)
            draft_path = os.fspath(draft_model)
            if not os.path.isfile(draft_path):
                raise ValueError(f"draft_model: no file {draft_path}")
            o.spec_draft_path = draft_path
            o.spec_draft_max = 16  # (weir serve's --draft-max; the adaptive rule picks fewer where they do not pay)
        elif draft_model is not None:
            # weir's LlamaPromptLookupDecoding, or llama-cpp-python's of the same name and fields.
            if (type(draft_model).__name__ != "LlamaPromptLookupDecoding"
                    or not hasattr(draft_model, "max_ngram_size") or not hasattr(draft_model, "num_pred_tokens")):
                raise TypeError(f"draft_model: expected weir.LlamaPromptLookupDecoding (prompt lookup) or a draft model's "
                                f"GGUF path, got {type(draft_model).__name__}")
            lookup = LlamaPromptLookupDecoding(draft_model.max_ngram_size, draft_model.num_pred_tokens)
            o.spec_ngram_max = lookup.max_ngram_size
            o.spec_draft_max = lookup.num_pred_tokens
        if draft_gpu_layers is not None:
            if not isinstance(draft_model, (str, os.PathLike)):
                raise ValueError("draft_gpu_layers: there is no draft model (draft_model=\"path.gguf\")")
            _check_int("draft_gpu_layers", draft_gpu_layers, -1, _INT32_MAX)
            o.spec_draft_gpu_layers = draft_gpu_layers
        self.model_path = model_path
        self._model = _weir.Model(model_path, o)
        self._seeds = random.Random(seed)
        if verbose:
            import sys

            print(f"weir: {os.path.basename(model_path)} ({self._model.architecture}) on {self._model.placement}, "
                  f"{self._model.n_ctx} cells", file=sys.stderr)

    # --- the model ---------------------------------------------------------

    def _m(self) -> _weir.Model:
        if self._model is None:
            raise ValueError("this Llama is closed")
        return self._model

    def n_ctx(self) -> int:
        return self._m().n_ctx

    def n_vocab(self) -> int:
        return self._m().n_vocab

    def n_embd(self) -> int:
        return self._m().n_embd

    def token_eos(self) -> int:
        return self._m().token_eos

    def token_bos(self) -> int:
        return self._m().token_bos

    def close(self) -> None:
        """Stops the engine and frees the model (also on garbage collection).
        Safe while other threads use this Llama: their generations end and
        their calls, then and later, raise ValueError."""
        model, self._model = self._model, None
        if model is not None:
            model.close()

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # --- tokens ------------------------------------------------------------

    def tokenize(self, text: Union[bytes, str], add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of text (bytes, as llama-cpp-python, or str). add_bos: a
        BOS first where the model's vocabulary asks for one; special: parse
        special tokens' text ("<start_of_turn>") as those tokens."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        if not isinstance(text, (bytes, bytearray)):
            raise TypeError(f"text: expected bytes or str, got {type(text).__name__}")
        return self._m().tokenize(bytes(text), add_bos, special)

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes:
        """The bytes of tokens, concatenated (may end inside a character)."""
        ids = list(tokens)
        n_vocab = self._m().n_vocab
        for t in ids:
            _check_int("tokens", t, 0, n_vocab - 1)
        return self._m().detokenize(ids, special)

    # --- completions -------------------------------------------------------

    def __call__(self, prompt: Union[str, List[int]], **kwargs: Any) -> Any:
        return self.create_completion(prompt, **kwargs)

    def create_completion(
        self,
        prompt: Union[str, List[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        echo: bool = False,
        stop: Stop = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        logprobs: Optional[int] = None,
        model: Optional[str] = None,
        ignore_eos: bool = False,
        grammar: Optional[str] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        json_schema: Optional[Dict[str, Any]] = None,
        n: int = 1,
        best_of: Optional[int] = None,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """A text completion of prompt (text or token ids): a text_completion
        dict, or with stream=True an iterator of its chunks. max_tokens None
        or < 1: until the context is full or the model ends; ignore_eos (an
        extension, as weir serve's): generate max_tokens whatever comes.
        grammar: a GBNF grammar (start rule "root") the text must match;
        json_schema: a JSON schema it must match (one of the two);
        logit_bias: {token id: bias from -100 to 100} added to the logits.
        echo: each choice's text begins with the prompt (not with logprobs);
        suffix: fill in the middle, for models with fill-in-the-middle
        tokens (the text goes between prompt and suffix); n: choices (with a
        seed, each repeatable); best_of: candidates of which the n with the
        highest mean log-probability per token return (not with stream). As
        weir serve's, prompt may be a list of texts or of token id lists:
        n choices each, prompt-major."""
        body = self._sampling(max_tokens, temperature, top_p, min_p, top_k, stop, frequency_penalty,
                              presence_penalty, repeat_penalty, seed, model)
        body["prompt"] = prompt
        _choice_fields(body, n, best_of, stream)
        if suffix is not None:
            body["suffix"] = suffix
        if echo:
            body["echo"] = True
        if ignore_eos:
            body["ignore_eos"] = True
        if logprobs is not None:
            body["logprobs"] = logprobs
        _output_fields(body, grammar, logit_bias, json_schema=json_schema)
        answer = self._start(False, body)
        return self._stream(answer) if stream else self._whole(answer)

    def create_chat_completion(
        self,
        messages: List[Dict[str, Any]],
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        stream: bool = False,
        stop: Stop = None,
        seed: Optional[int] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        model: Optional[str] = None,
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Optional[Union[str, Dict[str, Any]]] = None,
        parallel_tool_calls: Optional[bool] = None,
        response_format: Optional[Dict[str, Any]] = None,
        grammar: Optional[str] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        n: int = 1,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """An answer to messages ([{"role": ..., "content": ...}]) through the
        model's chat template: a chat.completion dict, or with stream=True
        an iterator of chat.completion.chunk dicts. tools ([{"type":
        "function", "function": {"name", "description", "parameters"}}]) go
        to the template; calls the model makes come back as
        message["tool_calls"] (streamed: delta["tool_calls"]) with
        finish_reason "tool_calls". tool_choice: "none", "auto", "required"
        or {"type": "function", "function": {"name": ...}}, as OpenAI's.
        response_format: {"type": "json_object"} or {"type": "json_schema",
        "json_schema": {"name": ..., "schema": {...}}} (or llama-cpp-python's
        {"type": "json_object", "schema": {...}}): the answer is JSON of that
        shape; grammar: a GBNF grammar instead; logit_bias and n (choices)
        as create_completion's."""
        body = self._sampling(max_tokens, temperature, top_p, min_p, top_k, stop, frequency_penalty,
                              presence_penalty, repeat_penalty, seed, model)
        body["messages"] = messages
        _choice_fields(body, n, None, stream)
        if tools is not None:
            body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        if parallel_tool_calls is not None:
            body["parallel_tool_calls"] = parallel_tool_calls
        if logprobs:
            body["logprobs"] = True
        if top_logprobs is not None:
            body["top_logprobs"] = top_logprobs  # the engine refuses it without logprobs, as weir serve does
        _output_fields(body, grammar, logit_bias, response_format=response_format)
        answer = self._start(True, body)
        return self._stream(answer) if stream else self._whole(answer)

    # --- embeddings --------------------------------------------------------

    def create_embedding(
        self,
        input: Union[str, List[str], List[int], List[List[int]]],
        model: Optional[str] = None,
        encoding_format: str = "float",
        dimensions: Optional[int] = None,
        user: Optional[str] = None,
        normalize: bool = True,
    ) -> Dict[str, Any]:
        """Embeddings of input (a text, texts, token ids, or lists of token
        ids) as OpenAI's /v1/embeddings returns them (and weir serve): {"object":
        "list", "data": [{"object": "embedding", "index", "embedding"}],
        "model", "usage"}. The model's hidden states after its output norm,
        pooled as its GGUF says (pooling_type; mean when absent), L2-normalized
        unless normalize=False. Several inputs run side by side. dimensions:
        only the model's own size (n_embd()); encoding_format "base64" gives
        each vector as base64 of its float32 bytes."""
        body: Dict[str, Any] = {"input": input, "model": model if model is not None else self.model_path,
                                "encoding_format": encoding_format, "normalize": normalize}
        if dimensions is not None:
            body["dimensions"] = dimensions
        if user is not None:
            body["user"] = user
        try:
            text = json.dumps(body)
        except (TypeError, ValueError) as e:
            raise TypeError(f"input: expected text, texts, token ids or lists of token ids: {e}") from None
        return json.loads(self._m().create_embedding(text))

    def embed(
        self,
        input: Union[str, List[str]],
        normalize: bool = True,
        truncate: bool = True,
        return_count: bool = False,
    ) -> Any:
        """The embedding of a text (a list of floats), or of each of a list
        of texts (a list of them), as llama-cpp-python's embed gives them.
        normalize: L2 (unit length); truncate: a text longer than the context
        is cut to its first n_ctx() tokens (else ValueError); return_count:
        (embeddings, tokens) instead."""
        texts = [input] if isinstance(input, str) else list(input)
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"input: expected a str or a list of str, got {type(t).__name__}")
        ids = [self._m().tokenize(t.encode("utf-8"), True, True) for t in texts]
        if truncate:
            ids = [i[: self.n_ctx()] for i in ids]
        out = self.create_embedding(ids, normalize=normalize) if ids else {"data": [], "usage": {"total_tokens": 0}}
        vectors = [d["embedding"] for d in out["data"]]
        result = vectors[0] if isinstance(input, str) else vectors
        return (result, out["usage"]["total_tokens"]) if return_count else result

    # --- inside ------------------------------------------------------------

    def _sampling(self, max_tokens: Optional[int], temperature: float, top_p: float, min_p: float, top_k: int,
                  stop: Stop, frequency_penalty: float, presence_penalty: float, repeat_penalty: float,
                  seed: Optional[int], model: Optional[str]) -> Dict[str, Any]:
        if repeat_penalty != 1.0:
            raise ValueError("repeat_penalty: not supported; use presence_penalty or frequency_penalty")
        body: Dict[str, Any] = {
            "temperature": temperature,
            "top_p": top_p,
            "min_p": min_p,
            "top_k": top_k,
            "stop": _stop_list(stop),
            "frequency_penalty": frequency_penalty,
            "presence_penalty": presence_penalty,
            "seed": seed if seed is not None else self._seeds.getrandbits(63),
        }
        if max_tokens is not None and max_tokens > 0:
            body["max_tokens"] = max_tokens
        if model is not None:
            body["model"] = model
        else:
            body["model"] = self.model_path
        return body

    def _start(self, chat: bool, body: Dict[str, Any]) -> "_weir.Answer":
        try:
            text = json.dumps(body)
        except (TypeError, ValueError) as e:
            raise TypeError(f"the request's arguments are not plain values: {e}") from None
        return self._m().start(chat, text)

    @staticmethod
    def _whole(answer: "_weir.Answer") -> Dict[str, Any]:
        try:
            while not answer.wait_done(_POLL_SECONDS):
                pass
        except BaseException:
            answer.cancel()  # Ctrl-C (KeyboardInterrupt) or another signal's exception
            raise
        return json.loads(answer.whole())

    @staticmethod
    def _stream(answer: "_weir.Answer") -> Iterator[Dict[str, Any]]:
        try:
            while not answer.ended:
                for text in answer.next_chunks(_POLL_SECONDS):
                    chunk = json.loads(text)
                    if "error" in chunk:
                        err = chunk["error"]
                        message = err.get("message", "generation failed")
                        raise ValueError(message) if err.get("type") == "invalid_request_error" else WeirError(message)
                    yield chunk
        finally:
            answer.cancel()  # a no-op once it ended; stops it when the caller stopped reading
