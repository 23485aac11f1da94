"""OpenAI's API (``--openai-port``) for generative and embedding models,
by concern.

frontend    OpenAIFrontend: its port over the HTTP/1.1 stack, the models it
            lists, cancelling what a departed client asked for
routes      the route table and the handlers: completions and chat (one
            answer or server-sent events), embeddings, models
schema      the request bodies read and checked, OpenAI's 400s
codec       OpenAI requests into Triton requests (text_input, stream,
            sampling parameters) and responses into OpenAI's documents
chat        the chat template: the model folder's (jinja2) or a plain one
errors      OpenAI's error object

Nothing imports this package but the command line.
"""

from pyserver.frontends.openai.frontend import DEFAULT_PORT, OpenAIFrontend

__all__ = ["DEFAULT_PORT", "OpenAIFrontend"]
