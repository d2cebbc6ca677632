"""The names of one deployment's resources: what `upvotes provision` creates and every tool and
test addresses (a room of its own, below the tools that create, run and check them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resources:
    """Everything `provision` creates; names are short IDs, not full paths."""

    project: str
    instance: str
    database: str
    topic: str
    subscription: str
    dead_letter_topic: str
    dead_letter_subscription: str = ""

    @property
    def dead_letter_subscription_id(self) -> str:
        return self.dead_letter_subscription or f"{self.dead_letter_topic}-kept"

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.project}/topics/{topic}"

    def subscription_path(self, subscription: str) -> str:
        return f"projects/{self.project}/subscriptions/{subscription}"
