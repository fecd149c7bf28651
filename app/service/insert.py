"""The insert sequence, once for every backend, over the narrow interface of
app/service/insert_backend.py: an insert call is prepared (ids, fingerprints, times,
refusals within the batch), then applied under the backend's write lock: the ids held
(retries answered again, conflicts refused, replacements), the stored matches of the
accepted documents, the pairs within the batch, the room, each document's fate
(app/service/decide.py) and the cluster it joins; then, while the backend may begin
writing what is stored, the shared passages and the answers; the backend publishes what
was stored (or undoes it when its commit fails) and the answers are given in order.

The backends keep where documents live and how they are written: an embedded row or a
Redis sequence number is a ``handle`` here, ordered by age."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from app.core.fingerprint import Fingerprints
from app.core.rule import Pairs
from app.core.types import Rows
from app.service import decide
from app.service.insert_backend import Call, InsertBackend, Pending, prepare
from app.service.matching import matches_of
from app.service.passages import BatchPassages, Found, PassageQuery, annotated, relations
from app.service.types import (
    INSERT_MATCH_LIMIT,
    InsertResult,
    Match,
    NewDocument,
    Query,
    Refused,
)

__all__ = ["Call", "InsertBackend", "Pending", "answers", "apply", "prepare"]


def apply(call: Call, backend: InsertBackend) -> None:
    """Under the backend's write lock: the ids held, then matching, the fates and answers
    of the accepted documents, then the backend's writes; a retry is answered after
    them (it may finish what its first attempt started). The backend's batched reads
    and writes, and O(documents + matches) of Python here."""
    candidates = [p for p in range(len(call.documents)) if p not in call.refused]
    replaced, again = backend.held(call, candidates)
    for position, (stored, same_text, same_metadata) in again.items():
        conflict = decide.sent_again(call.ids[position], same_text, same_metadata)
        if conflict is None:
            call.retried[position] = stored
        else:
            call.refused[position] = conflict
    accepted = [p for p in candidates if p not in call.refused and p not in call.retried]
    pending = _admitted(call, backend, accepted, replaced) if accepted else None
    backend.publish(call, pending)
    for position, stored in call.retried.items():
        if position not in call.refused and call.results[position] is None:
            call.results[position] = backend.retry_answer(call.ids[position], stored)


def answers(call: Call) -> list[InsertResult | Refused]:
    """The answers in order, a refused document's at its position (its id only where it
    was given). O(documents)."""
    for position, error in call.refused.items():
        given = call.documents[position].id
        call.results[position] = Refused(call.ids[position] if given else None, error)
    return [result for result in call.results if result is not None]


def _admitted(
    call: Call, backend: InsertBackend, accepted: list[int], replaced: dict[int, int]
) -> Pending:
    """Each accepted document matched against the stored ones and the earlier stored
    documents of its batch, its fate decided and its answer given: the documents to
    store. The batched reads first (matches, pairs within), then the fates; the backend
    may begin writing then (``begin_writing``), while the passages, which change only
    the answers, are read and verified; then the answers. O(1) a document without
    matches, O(matches log matches) with them."""
    options = call.options
    query = Query(limit=INSERT_MATCH_LIMIT, since=options.since, until=options.until)
    everything = len(accepted) == len(call.fingerprints) == len(call.documents)
    fingerprints = (
        call.fingerprints  # the usual: no copy
        if everything
        else call.fingerprints.select(call.fingerprint_at[accepted])
    )
    stamps = call.stamps[accepted]
    documents = [call.documents[p] for p in accepted]
    exclude = np.array([replaced.get(p, -1) for p in accepted], dtype=np.int64)
    keys = None if call.passage_keys is None else [call.passage_keys[p] for p in accepted]
    if keys is not None:
        backend.look_up_passages(keys)
    stored = backend.match(fingerprints, query, exclude, stamps)
    if len(accepted) > 1:
        within = backend.match_within(fingerprints, stamps, query)
    else:
        within = Pairs.empty()
    # Already expired when it arrives: matched, answered, not stored.
    expired = backend.expired_on_arrival(stamps)
    granted, unlimited = backend.room(int(np.count_nonzero((exclude < 0) & ~expired)))
    admission = decide.Admission(options.on_duplicate, granted, unlimited)
    pending = Pending(backend.first_handle(), backend.id_of, backend.cluster_of)
    # Number among the accepted -> its pending handle, -1 for a document not stored.
    handle_at = np.full(len(accepted), -1, dtype=np.int64)
    stored_spans = stored.spans(len(accepted))
    batch_spans = within.spans(len(accepted))
    fates: list[_Fate] = []
    for number, position in enumerate(accepted):
        span = stored_spans[number]
        matches = matches_of(stored, span, INSERT_MATCH_LIMIT, backend.id_of)
        best = int(stored.rows[span[0]]) if matches else -1
        if batch_spans[number][1] > batch_spans[number][0]:
            matches, best = _with_batch_matches(
                stored, span, within, batch_spans[number], handle_at, pending
            )
        replaces = position in replaced
        fate = admission.decide(bool(matches), replaces, bool(expired[number]))
        if fate is decide.Fate.REFUSED:
            call.refused[position] = backend.refusal(admission.added)
            continue
        document_id = call.ids[position]
        cluster = pending.cluster_of(best) if matches else None
        skipped = fate is decide.Fate.SKIPPED
        if not skipped:
            if replaces:
                pending.replaced.append(replaced[position])
            handle = pending.add(position, number, document_id, cluster)
            handle_at[number] = handle
            cluster = handle if cluster is None else cluster
        cluster_id = (
            None if cluster is None else _cluster_name(cluster, backend, pending)
        ) or document_id
        if not skipped:
            pending.cluster_names.append(cluster_id)
        fates.append(_Fate(number, position, matches, cluster, cluster_id, skipped, replaces))
    # What is stored is known: the backend may write it while the passages, which change
    # only the answers, are verified.
    began = backend.begin_writing(call, pending)
    try:
        shared = _shared_passages(backend, documents, keys, fingerprints, stamps, exclude, query)
        _answer_each(call, backend, fates, pending, shared, stamps, fingerprints.simhash)
    except BaseException:
        if began:  # the store has the batch, or will: memory must hold it too
            backend.publish(call, pending)
        raise
    return pending


def _answer_each(
    call: Call,
    backend: InsertBackend,
    fates: list[_Fate],
    pending: Pending,
    shared: tuple[list[list[Found]], BatchPassages] | None,
    stamps: Rows,
    simhashes: npt.NDArray[np.uint64],
) -> None:
    """Each admitted document's answer, in order: its matches, with the passages it
    shares (``shared``: from the store and the batch; None: passages are off) and its
    relations. O(1) a document that shares nothing."""
    for number, position, matches, cluster, cluster_id, skipped, replaces in fates:
        document_id = call.ids[position]
        found: list[Found] | None = None
        if shared is not None:
            from_store, batch = shared
            stamp, simhash = int(stamps[number]), int(simhashes[number])
            found = batch.find(number, simhash, stamp, {m.id for m in matches}, from_store[number])
            if not skipped:
                batch.stored(number, document_id, simhash, stamp)
        contains, contained_in = (None, None) if found is None else relations(found, matches)
        if found:
            matches = annotated(matches, found)
        call.results[position] = InsertResult(
            id=document_id,
            inserted=not skipped,
            duplicate_of=(
                backend.oldest_member(position, cluster, pending)
                if matches and cluster is not None
                else None
            ),
            cluster_id=cluster_id,
            matches=matches,
            replaced=replaces and not skipped,
            contains=contains,
            contained_in=contained_in,
        )


class _Fate(NamedTuple):
    """An accepted document's fate, decided before its answer is made: its number among
    the accepted, its position in the call, its near-duplicate matches, its cluster's
    handle (None: none) and name, whether it was skipped and whether it replaces one."""

    number: int
    position: int
    matches: list[Match]
    cluster: int | None
    cluster_id: str
    skipped: bool
    replaces: bool


def _cluster_name(cluster: int, backend: InsertBackend, pending: Pending) -> str | None:
    """The id naming a cluster: its first document's (None: gone, and no longer named)."""
    if cluster < pending.first:
        return backend.cluster_name(cluster)
    return pending.id_of(cluster)


def _shared_passages(
    backend: InsertBackend,
    documents: list[NewDocument],
    keys: list[npt.NDArray[np.uint64]] | None,
    fingerprints: Fingerprints,
    stamps: Rows,
    exclude: Rows,
    query: Query,
) -> tuple[list[list[Found]], BatchPassages] | None:
    """What the accepted documents share with the stored ones (only what may be a
    containment, and their near-duplicates), and the batch's own passages for the
    relations between them. ``keys``: their passage fingerprints, which prepare makes
    whenever passages are on (a setting a collection keeps); None: passages are off."""
    if keys is None:
        return None
    config = backend.config.passages
    asked = PassageQuery.batch(
        [d.text for d in documents],
        keys,
        fingerprints.simhash.tolist(),
        exclude.tolist(),
        [d.host_key() for d in documents],
    )
    window = backend.config.match_window_us
    batch = BatchPassages(config, backend.passage_candidates, asked, query, window)
    return backend.stored_passages(asked, query, stamps), batch


def _with_batch_matches(
    stored: Pairs,
    span: tuple[int, int],
    within: Pairs,
    batch_span: tuple[int, int],
    handle_at: Rows,
    pending: Pending,
) -> tuple[list[Match], int]:
    """The matches of one document among stored documents and the stored earlier
    documents of its batch, best first, and the handle of the best."""
    first, last = span
    start, end = batch_span
    handles = handle_at[within.rows[start:end]]
    kept = handles >= 0
    merged_handles = np.concatenate([stored.rows[first:last], handles[kept]])
    merged = Pairs(
        np.zeros(last - first + int(kept.sum()), dtype=np.int64),
        merged_handles,
        np.concatenate([stored.methods[first:last], within.methods[start:end][kept]]),
        np.concatenate([stored.similarity[first:last], within.similarity[start:end][kept]]),
        np.concatenate([stored.distances[first:last], within.distances[start:end][kept]]),
        merged_handles,
    ).sorted()

    matches = matches_of(merged, (0, len(merged.rows)), INSERT_MATCH_LIMIT, pending.id_of)
    return matches, int(merged.rows[0]) if matches else -1
