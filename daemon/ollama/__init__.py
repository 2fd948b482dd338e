"""The Ollama API on a port of its own (11434 by default): ``/api/chat``, ``/api/generate``, ``/api/embed``,
``/api/tags``, ``/api/show``, ``/api/ps``, ``/api/version``, for tools that speak only Ollama's API.

An adapter, not a second router: each call becomes the matching /v1 call, sent to the daemon's own
/v1 on this machine with the caller's key, and its answer is put back in Ollama's shape (the SSE
stream as NDJSON lines). Queueing, start on request, fallbacks, keys, their limits and the access
log are thus /v1's own. ``requests`` turns Ollama's bodies into OpenAI ones, ``answers`` OpenAI's
answers into Ollama's, ``facts`` says what Ollama's model lists say of a model, ``api`` holds the
handlers and ``app`` the app with its middlewares (the Host check, errors in Ollama's shape).
"""
