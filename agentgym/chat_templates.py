"""Chat templates and a tiny offline tokenizer for tests and CPU smoke runs.

:data:`QWEN_STYLE_TEMPLATE` is a Jinja chat template that follows the Qwen2.5
conventions: ``<|im_start|>role\\n...<|im_end|>\\n`` turns, tools listed as JSON
lines inside ``<tools></tools>`` in the system turn, assistant calls rendered as
``<tool_call>`` blocks (the same text :func:`agentgym.parsing.render_assistant_text`
produces), and consecutive ``tool`` messages grouped into one ``user`` turn of
``<tool_response>`` blocks.

:func:`build_tiny_tokenizer` trains a small byte-level BPE tokenizer that uses
this template, so chat-format code can be exercised without downloading a model.
``transformers`` and ``tokenizers`` are imported only inside that function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "QWEN_STYLE_TEMPLATE",
    "SPECIAL_TOKENS",
    "TOOL_TAG_TOKENS",
    "build_tiny_tokenizer",
]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

#: Control tokens: added as special tokens (dropped by ``skip_special_tokens``).
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")

#: Tool markup tags: single added tokens that, as in Qwen2.5, are *not* special,
#: so decoding with ``skip_special_tokens=True`` keeps the tool-call markup.
TOOL_TAG_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

_TOOLS_INTRO = (
    "\\n\\n# Tools\\n\\n"
    "You can call the functions below to help with the request.\\n\\n"
    "Their signatures are listed inside <tools></tools> tags, one JSON object "
    "per line:\\n<tools>"
)
_TOOLS_OUTRO = (
    "\\n</tools>\\n\\n"
    "To call a function, answer with a JSON object holding its name and "
    "arguments inside <tool_call></tool_call> tags, one block per call:\\n"
    '<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    "<args-json-object>}\\n</tool_call>"
)

QWEN_STYLE_TEMPLATE: str = (
    "{%- set ns = namespace(system='" + DEFAULT_SYSTEM_PROMPT + "', first=0) -%}\n"
    "{%- if messages and messages[0].role == 'system' -%}\n"
    "  {%- set ns.system = messages[0].content or '' -%}\n"
    "  {%- set ns.first = 1 -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_start|>system\\n' + ns.system -}}\n"
    "{%- if tools -%}\n"
    '  {{- "' + _TOOLS_INTRO + '" -}}\n'
    "  {%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}\n"
    '  {{- "' + _TOOLS_OUTRO + '" -}}\n'
    "{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- for message in messages -%}\n"
    "  {%- if loop.index0 < ns.first -%}\n"
    "  {%- elif message.role == 'assistant' -%}\n"
    "    {{- '<|im_start|>assistant\\n' + (message.content or '') -}}\n"
    "    {%- for call in (message.tool_calls or []) -%}\n"
    "      {%- set fn = call.function if call.function is defined else call -%}\n"
    "      {%- if message.content or not loop.first -%}{{- '\\n' -}}{%- endif -%}\n"
    "      {{- '<tool_call>\\n{\"name\": ' + (fn.name | tojson) + ', \"arguments\": ' -}}\n"
    "      {%- if fn.arguments is not defined or fn.arguments is none -%}{{- '{}' -}}\n"
    "      {%- elif fn.arguments is string -%}{{- fn.arguments -}}\n"
    "      {%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}\n"
    "      {{- '}\\n</tool_call>' -}}\n"
    "    {%- endfor -%}\n"
    "    {{- '<|im_end|>\\n' -}}\n"
    "  {%- elif message.role == 'tool' -%}\n"
    "    {%- if loop.previtem is not defined or loop.previtem.role != 'tool' -%}\n"
    "      {{- '<|im_start|>user' -}}\n"
    "    {%- endif -%}\n"
    "    {{- '\\n<tool_response>\\n' + (message.content or '') + "
    "'\\n</tool_response>' -}}\n"
    "    {%- if loop.nextitem is not defined or loop.nextitem.role != 'tool' -%}\n"
    "      {{- '<|im_end|>\\n' -}}\n"
    "    {%- endif -%}\n"
    "  {%- else -%}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + "
    "'<|im_end|>\\n' -}}\n"
    "  {%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n"
)
"""Jinja chat template in the Qwen2.5 layout (see the module docstring)."""

_WORDS = (
    "the a an of to and in is it you that for on with as be this are was can "
    "what how when where which who why please thanks result answer question "
    "search query file path read write list open close find get set add sum "
    "number value name city weather temperature today tomorrow error ok true "
    "false null calculator python code run output input user assistant system "
    "tool function arguments parameters call response content message data"
).split()
_TOOL_NAMES = ("search", "calculator", "read_file", "get_weather", "run_python")
_PROSE = """
An agent works in an environment by taking turns. Each turn it reads the latest
observation, thinks about the task, and either answers the user directly or calls
one of the available tools. A tool returns a result, such as a number, a list of
files, the text of a web page, or an error message explaining what went wrong.
The environment checks every call: the function must exist, the arguments must
match the schema, and the output is truncated when it is too long. Rewards are
given at the end of an episode when the final answer is correct, and sometimes
after each step when progress can be measured. Training uses many episodes in
parallel, collecting trajectories of messages, token ids and log probabilities.
Please find the population of the largest city, convert the temperature from
Celsius to Fahrenheit, count the words in the document, and report the results.
"""
_PUNCTUATION = "{}[]():;,.\"'`<>/\\|!?@#$%^&*-_=+~\n\t "


def _training_corpus() -> list[str]:
    """Return a deterministic corpus of chat- and tool-call-like lines."""
    lines = [_PUNCTUATION, "0123456789", " ".join(_WORDS), " ".join(_WORDS).title()]
    lines += [_TOOLS_INTRO, _TOOLS_OUTRO, DEFAULT_SYSTEM_PROMPT] + _PROSE.split(".") * 2
    for i, word in enumerate(_WORDS):
        name = _TOOL_NAMES[i % len(_TOOL_NAMES)]
        other = _WORDS[(i * 7 + 3) % len(_WORDS)]
        lines += [
            f"<|im_start|>user\nWhat is the {word} of {other} {i}?<|im_end|>",
            f'<tool_call>\n{{"name": "{name}", "arguments": {{"{word}": '
            f'"{other}", "n": {i * 37 % 1000}, "x": {i / 8}}}}}\n</tool_call>',
            f'<tool_response>\n{{"{other}": [{i}, true, null]}}\n</tool_response>',
            f"The {word} is {i * 13}. I will call {name} with {other}.",
            f'{{"name": "{name}", "parameters": {{"{other}": [{i}, -{i}.5]}}}}',
        ]
    return lines


def build_tiny_tokenizer(vocab_size: int = 1024, extra_corpus: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """Train a small byte-level BPE tokenizer that uses :data:`QWEN_STYLE_TEMPLATE`.

    The tokenizer is trained offline on a small built-in corpus (plus
    ``extra_corpus``), so building it is deterministic and fast. Being
    byte-level, it encodes any string and decoding gives the same string back.
    ``<|im_start|>``, ``<|im_end|>`` and ``<|endoftext|>`` are special tokens;
    the tool tags (``<tool_call>`` ...) are single added tokens that are not
    special (as in Qwen2.5).

    Args:
        vocab_size: The largest vocabulary to train (at least 256 bytes plus the
            7 added tokens); the corpus may yield slightly fewer merges.
        extra_corpus: More training lines, e.g. an env's own text (see
            :func:`agentgym.models.env_corpus`), so its words become single tokens.

    Returns:
        A ``PreTrainedTokenizerFast`` with eos ``<|im_end|>``, pad
        ``<|endoftext|>`` and the chat template set.

    Raises:
        ValueError: If ``vocab_size`` is too small for the byte alphabet.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.trainers import BpeTrainer
    from transformers import PreTrainedTokenizerFast

    added = SPECIAL_TOKENS + TOOL_TAG_TOKENS
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(added):
        raise ValueError(f"vocab_size must be >= {len(alphabet) + len(added)}")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(added),
        initial_alphabet=sorted(alphabet),
        show_progress=False,
    )
    backend.train_from_iterator([*_training_corpus(), *extra_corpus], trainer=trainer)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=QWEN_STYLE_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
