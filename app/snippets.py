"""Connection snippets for the Access page: how to point real tools at this machine's ``/v1``.

Pure functions of the URL, a model name and whether a key is needed, so tests can assert them and
the page always shows the real address.
"""

from __future__ import annotations

from dataclasses import dataclass

KEY_PLACEHOLDER = "YOUR_API_KEY"


@dataclass(frozen=True)
class Snippet:
    title: str
    language: str
    text: str


def snippets(api_url: str, model: str, keys_required: bool) -> tuple[Snippet, ...]:
    key = KEY_PLACEHOLDER if keys_required else "not-needed"
    auth = f' \\\n  -H "Authorization: Bearer {KEY_PLACEHOLDER}"' if keys_required else ""
    model = model or "MODEL"
    base = api_url.rstrip("/")
    return (
        Snippet("curl", "shell",
                f'curl {base}/chat/completions \\\n  -H "Content-Type: application/json"{auth} \\\n'
                f'  -d \'{{"model": "{model}", "max_tokens": 64, '
                f'"messages": [{{"role": "user", "content": "Hello!"}}]}}\''),
        Snippet("Python (openai)", "python",
                "from openai import OpenAI\n\n"
                f'client = OpenAI(base_url="{base}", api_key="{key}")\n'
                "reply = client.chat.completions.create(\n"
                f'    model="{model}",\n'
                '    messages=[{"role": "user", "content": "Hello!"}],\n'
                "    max_tokens=64,\n"
                ")\nprint(reply.choices[0].message.content)"),
        Snippet("JavaScript (openai)", "javascript",
                'import OpenAI from "openai";\n\n'
                f'const client = new OpenAI({{ baseURL: "{base}", apiKey: "{key}" }});\n'
                "const reply = await client.chat.completions.create({\n"
                f'  model: "{model}",\n'
                '  messages: [{ role: "user", content: "Hello!" }],\n'
                "  max_tokens: 64,\n"
                "});\nconsole.log(reply.choices[0].message.content);"),
        Snippet("Continue", "yaml",
                "# ~/.continue/config.yaml\nmodels:\n"
                f"  - name: {model} (MirbadLLM)\n    provider: openai\n    model: {model}\n"
                f"    apiBase: {base}\n    apiKey: {key}\n    roles: [chat, edit, apply]"),
        Snippet("aider", "shell",
                f"export OPENAI_API_BASE={base}\nexport OPENAI_API_KEY={key}\n"
                f"aider --model openai/{model}"),
        Snippet("Open WebUI", "shell",
                "# Settings → Connections → OpenAI API, or when starting it:\n"
                f"OPENAI_API_BASE_URL={base} \\\nOPENAI_API_KEY={key} \\\nopen-webui serve"),
    )
