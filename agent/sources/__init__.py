"""Getting models onto this node: will it fit, downloads, imports. Each layer uses only those below it.

    api.py         HTTP handlers (/fit, /downloads, /imports/*, /transfers), spliced into agent.server
    service.py     ModelSources: the one object per agent the handlers call (built by agent.deps)
    downloads.py   a download as a transfer: a Hugging Face file (name, pattern, quant) or a plain URL
    imports.py     an import as a transfer: an Ollama store's model, LM Studio's or a folder's GGUFs
    huggingface.py Hugging Face metadata, picking files, a GGUF header by range reads
    fetch.py       one file over HTTP into the store: guarded redirects, resume, checksum, rename
    transfers.py   transfers in the background: progress, cancel, the long-poll version
    store.py       the models folder: the only place downloads and imports may write
    url_guard.py   where a download may connect: public addresses only, after DNS and every redirect

The contracts (request and reply models) are in ``agent.api.sources``.
"""
