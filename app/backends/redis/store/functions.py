"""The Redis functions (Redis 7 FUNCTION LOAD) that write a row group atomically.

Every function touches the four hashes of one row group only (``i``, ``s``, ``r``, ``w``:
one hash tag, so one cluster slot), as a cluster requires of a script. Functions, unlike
EVAL scripts, are part of the data set: replicas and the append-only file carry them, so
a promoted replica has them without a reload.

The contract of each function, for the group's keys ``i s r w``:

``neardup_insert_v1`` (ARGV: group, groups, replace ('0' or '1'), then id, digest, blob,
record for each document). A new id gets the group's next row (``HINCRBY i ''``, times
``groups`` plus ``group``), and its ``i``, ``s``, ``r`` entries and a ``+`` work mark in
``w`` are written together. An id already held answers ``same`` when its digest equals
the one given (a retry: nothing changes), else ``other``; with replace, an id held with
another digest loses its row (``s`` and ``r`` entries gone, a ``-`` mark with the old
blob in ``w``) and gets a new one: ``replaced``. Answers, per document: {status, row,
old row, blob}, status 0 inserted, 1 same, 2 other, 3 replaced; the blob is the old row's
for replaced, the row's own for same when its first insert left its ``+`` mark (its
table entries may be unfinished: the retry writes them), else empty; old row empty but
for replaced.

``neardup_remove_v1`` (ARGV: ids). The id's row's ``i``, ``s``, ``r`` entries go, and a
``-`` mark with the blob in ``w`` says which table entries are left to remove. Answers
{row, blob} per id, empty strings for an id not held.

``neardup_remove_if_v1`` (ARGV: id, row for each document): ``neardup_remove_v1`` of
the ids still held under those rows (4 bytes each); an id held under another row (it
was removed and stored again since the caller read it) stays. Same answers.

``neardup_finish_v1`` (KEYS: ``w s``; ARGV: rows). After an insert's table entries are
written: drops the ``+`` marks of the rows, and answers the rows whose ``s`` entry is
gone (removed or replaced in between), whose table entries the caller must remove again.

``neardup_entries_v1`` (KEYS: sorted sets of one shard number, which share a hash tag;
ARGV: '+' or '-', then for each key the count of its members and the members). Adds
(score 0) or removes table entries: a batch's entries of one shard number, in every table,
in one call instead of a command per set.

``neardup_lookup_v1`` (read-only, KEYS: ``i s r``; ARGV: ids): {row, blob, record} per
id, empty strings for an id not held.
"""

from __future__ import annotations

LIBRARY = "neardup_v1"

SOURCE = """#!lua name=neardup_v1

local function row_bytes(row)
  if row > 4294967295 then
    return redis.error_reply('neardup: this group has no row numbers left')
  end
  return struct.pack('>I4', row)
end

local function new_row(keys, group, groups)
  local counter = redis.call('HINCRBY', keys[1], '', 1) - 1
  return row_bytes(counter * groups + group)
end

local function write(keys, id, digest, blob, record, row)
  redis.call('HSET', keys[1], id, row .. digest)
  redis.call('HSET', keys[2], row, blob)
  redis.call('HSET', keys[3], row, record)
  redis.call('HSET', keys[4], row, '+')
end

local function drop(keys, row)
  local blob = redis.call('HGET', keys[2], row) or ''
  redis.call('HDEL', keys[2], row)
  redis.call('HDEL', keys[3], row)
  redis.call('HSET', keys[4], row, '-' .. blob)
  return blob
end

local function insert(keys, args)
  local group, groups, replace = tonumber(args[1]), tonumber(args[2]), args[3] == '1'
  local out = {}
  for at = 4, #args, 4 do
    local id, digest, blob, record = args[at], args[at + 1], args[at + 2], args[at + 3]
    local held = redis.call('HGET', keys[1], id)
    if not held then
      local row = new_row(keys, group, groups)
      if type(row) == 'table' then return row end
      write(keys, id, digest, blob, record, row)
      out[#out + 1] = {0, row, '', ''}
    else
      local old = string.sub(held, 1, 4)
      if string.sub(held, 5) == digest then
        -- A retry. If the first attempt never finished its table entries, the answer
        -- carries the stored blob, so that the retry finishes them before answering.
        local pending = ''
        if redis.call('HGET', keys[4], old) == '+' then
          pending = redis.call('HGET', keys[2], old) or ''
        end
        out[#out + 1] = {1, old, '', pending}
      elseif not replace then
        out[#out + 1] = {2, old, '', ''}
      else
        local old_blob = drop(keys, old)
        local row = new_row(keys, group, groups)
        if type(row) == 'table' then return row end
        write(keys, id, digest, blob, record, row)
        out[#out + 1] = {3, row, old, old_blob}
      end
    end
  end
  return out
end

-- The id's row and fields dropped, when the id is held (under ``row``, unless nil).
local function remove_held(keys, id, row)
  local held = redis.call('HGET', keys[1], id)
  if held and (row == nil or string.sub(held, 1, 4) == row) then
    local found = string.sub(held, 1, 4)
    redis.call('HDEL', keys[1], id)
    return {found, drop(keys, found)}
  end
  return {'', ''}
end

local function remove(keys, args)
  local out = {}
  for at = 1, #args do
    out[#out + 1] = remove_held(keys, args[at], nil)
  end
  return out
end

local function remove_if(keys, args)
  local out = {}
  for at = 1, #args, 2 do
    out[#out + 1] = remove_held(keys, args[at], args[at + 1])
  end
  return out
end

local function finish(keys, args)
  local gone = {}
  for at = 1, #args do
    local row = args[at]
    if redis.call('HGET', keys[1], row) == '+' then
      redis.call('HDEL', keys[1], row)
    end
    if redis.call('HEXISTS', keys[2], row) == 0 then
      gone[#gone + 1] = row
    end
  end
  return gone
end

local function entries(keys, args)
  local command = args[1] == '+' and 'ZADD' or 'ZREM'
  local at = 2
  for k = 1, #keys do
    local count = tonumber(args[at])
    for j = at + 1, at + count do
      if command == 'ZADD' then
        redis.call('ZADD', keys[k], 0, args[j])
      else
        redis.call('ZREM', keys[k], args[j])
      end
    end
    at = at + count + 1
  end
  return #keys
end

local function lookup(keys, args)
  local out = {}
  for at = 1, #args do
    local held = redis.call('HGET', keys[1], args[at])
    if held then
      local row = string.sub(held, 1, 4)
      out[#out + 1] = {
        row,
        redis.call('HGET', keys[2], row) or '',
        redis.call('HGET', keys[3], row) or '',
      }
    else
      out[#out + 1] = {'', '', ''}
    end
  end
  return out
end

redis.register_function('neardup_insert_v1', insert)
redis.register_function('neardup_remove_v1', remove)
redis.register_function('neardup_remove_if_v1', remove_if)
redis.register_function('neardup_finish_v1', finish)
redis.register_function('neardup_entries_v1', entries)
redis.register_function{
  function_name = 'neardup_lookup_v1', callback = lookup, flags = {'no-writes'}
}
"""

INSERT = "neardup_insert_v1"
REMOVE = "neardup_remove_v1"
REMOVE_IF = "neardup_remove_if_v1"
FINISH = "neardup_finish_v1"
ENTRIES = "neardup_entries_v1"
LOOKUP = "neardup_lookup_v1"
