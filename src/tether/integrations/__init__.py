"""Integrations: tether as the session store of other agent frameworks, through their own public protocols.

- `tether.integrations.openai_agents`: `TetherSession`, the OpenAI Agents SDK's `Session` backed by a tether
  store (extra ``agents``);
- `tether.integrations.pydantic_ai`: tether histories to and from pydantic-ai messages, and persisting an
  agent's new messages to a tether session (extra ``pydantic-ai``).

Each framework's package is imported only by the module that needs it, with an error naming the extra.
"""

from __future__ import annotations
