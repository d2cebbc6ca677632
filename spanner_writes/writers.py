"""Writer generations: which delta keys a streaming launch may write.

A delta key names its writer, window and pane. The writer is the job name plus a generation
claimed here when the pipeline is built (at launch):

- a fresh launch takes the stored generation + 1 (1 for a name never seen), so a job drained
  and relaunched under the same name writes keys no earlier run of that name wrote, even for
  the same window and pane;
- an in-place update (Dataflow `--update`) keeps the stored generation, so a pane the updated
  job replays has the key it had before and collides with it (counted once). An update of a
  name with no row is a job launched before generations existed: it keeps generation 0, the
  bare job name, which is the identity such a job already writes with.

The claim also fixes how the generation spells its delta keys (schemas/delta_ids.py KEY_FORMAT): a fresh
launch takes the current format, an update keeps the stored one (the first format when none
is stored), so an update to a version with a new format still replays its predecessor's
panes under their old keys. Only a fresh launch, whose keys are new anyway, changes format.

The claim is one read-write transaction, so two launches racing on one name get different
generations.
"""

from __future__ import annotations

from typing import NamedTuple

from google.cloud import spanner

from schemas.delta_ids import FIRST_KEY_FORMAT, KEY_FORMAT, writer_identity
from spanner_store.database import run_transaction, run_with_retries, wait_for_schema
from spanner_store.tables import WRITER_GENERATION_COLUMNS, WRITER_GENERATIONS

LEGACY_GENERATION = 0


class WriterClaim(NamedTuple):
    writer_name: str
    generation: int
    identity: str  # what goes into every delta key this run writes (schemas/delta_ids.py writer_identity)
    key_format: int  # how this run spells its delta keys (schemas/delta_ids.py KEY_FORMAT)


def claim_generation(database, writer_name: str, update: bool) -> WriterClaim:
    """Claims the generation of a launch of `writer_name`: a new one, or with `update` the current one."""

    def claim(transaction) -> tuple[int, int]:
        rows = list(
            transaction.read(
                WRITER_GENERATIONS, columns=("Generation", "KeyFormat"), keyset=spanner.KeySet(keys=[[writer_name]])
            )
        )
        current, stored_format = rows[0] if rows else (None, None)
        if update:
            generation = LEGACY_GENERATION if current is None else current
            key_format = stored_format or FIRST_KEY_FORMAT
        else:
            generation = 1 if current is None else current + 1
            key_format = KEY_FORMAT
        transaction.insert_or_update(
            WRITER_GENERATIONS,
            columns=WRITER_GENERATION_COLUMNS,
            values=[(writer_name, generation, spanner.COMMIT_TIMESTAMP, key_format)],
        )
        return generation, key_format

    # A launch of this version before `upvotes provision` added WriterGenerations.KeyFormat
    # waits for the migration, as the sink does, rather than fail the launch.
    generation, key_format = wait_for_schema(
        lambda: run_with_retries(lambda: run_transaction(database, claim)), "writer claim"
    )
    return WriterClaim(writer_name, generation, writer_identity(writer_name, generation), key_format)
