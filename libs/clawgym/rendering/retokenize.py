"""An assistant turn the policy did not generate (a teacher's), as the policy's own output tokens.

Owns the rule that keeps a teacher's demonstration token-exact in the policy's terms: the turn is
rendered by the policy's chat template after the conversation it answers, and its output ids are
what the template places after the generation prompt, up to and including the token that closes the
turn (the stop token an engine would have produced). Not parsing the ids back into text and tool
calls (`clawgym.rendering.tool_formats`, as for generated ids), nor asking the teacher
(`clawgym.proxy.teacher`).

    text  = render(messages + [turn]) minus render(messages, add_generation_prompt=True)
    ids   = encode(generation_prompt + text) minus encode(generation_prompt), cut after the close

The generation prompt starts with a control token, so encoding from it gives the ids that encoding
the whole rendered conversation gives after the prompt. The one exception is a turn whose first
characters would merge with the generation prompt's last token (a BPE merge across the boundary):
no generation after that prompt can produce those ids, so the turn is then encoded alone (the same
text, ids a policy can emit).
"""

from clawgym.errors import InvalidArgument
from clawgym.protocols.conversation import Conversation, Message
from clawgym.rendering.template import ChatTemplate


def turn_text(template: ChatTemplate, conv: Conversation, turn: Message) -> str:
    """The template's text for `turn` after `conv`'s generation prompt, through the turn's close."""
    before = template.render(conv.messages, conv.tools, add_generation_prompt=True)
    after = template.render([*conv.messages, turn], conv.tools, add_generation_prompt=False)
    if not after.startswith(before):
        raise InvalidArgument(
            "the policy's chat template renders an assistant turn that does not continue its generation "
            "prompt: a teacher's answer cannot be recorded in the policy's tokens"
        )
    return after[len(before) :]


def turn_ids(
    template: ChatTemplate, conv: Conversation, turn: Message, max_tokens: int | None = None
) -> list[int]:
    """The policy's output ids for `turn` answering `conv` (module doc): ending with the stop token that
    closes it. InvalidArgument if the template renders no stop token after it."""
    text = turn_text(template, conv, turn)
    prompt = template.info.generation_prompt
    ids: list[int] = []
    if prompt:
        head = template.encode(prompt)
        joint = template.encode(prompt + text, None if max_tokens is None else max_tokens + len(head))
        if joint[: len(head)] == head:
            ids = joint[len(head) :]
    if not ids:
        ids = template.encode(text, max_tokens)
    stops = set(template.info.stop_token_ids)
    for i, token in enumerate(ids):
        if token in stops:
            return ids[: i + 1]
    raise InvalidArgument("the policy's chat template closes an assistant turn with no stop token")
