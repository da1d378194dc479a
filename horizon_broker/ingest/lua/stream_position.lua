-- Where a table's offset ARGV[1] ('' for none) stands in stream KEYS[1], in one call: the
-- stream's entries ever added, length, first entry id and last deleted id (XINFO STREAM, Redis
-- 7), whether the offset's entry is still there, and the entries after it (at most ARGV[2])
-- counted in Redis with the first one's id. The count is the costly part (up to ARGV[2] entries
-- walked): ARGV[3] = 'always' counts, 'if-gone' counts only when the offset's entry is gone (the
-- one case a trim check needs it), so a pass counts once (its lag). The eighth value says
-- whether it counted. A missing key is an empty stream; a key of another type fails (WRONGTYPE).
-- Fields Redis 6 lacks come back as -1 / ''.
-- ARGV[4] and ARGV[5] (optional) also read a batch: the entries after the offset through
-- ARGV[4] ('+': no bound), at most ARGV[5] ('': every one), returned ninth. The read starts at
-- the offset's own entry (XRANGE from the offset itself), so whether that entry is still there
-- and what follows it are seen at one instant: a producer's trim falls before or after the
-- read, never between the judgement and the entries it judges.
local reading = ARGV[4] ~= nil
local batch = {}
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, '', '0-0', 0, 0, '', 1, batch} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local fields = {}
for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
local first = ''
if type(fields['first-entry']) == 'table' then first = fields['first-entry'][1] end
local function range(low, high, count)
  if count == nil then return redis.call('XRANGE', KEYS[1], low, high) end
  return redis.call('XRANGE', KEYS[1], low, high, 'COUNT', count)
end
local low, here = '-', 0
local most = tonumber(ARGV[5] or '')
if ARGV[1] ~= '' then
  low = '(' .. ARGV[1]
  if reading then
    batch = range(ARGV[1], ARGV[4], most and most + 1)
    if #batch > 0 and batch[1][1] == ARGV[1] then
      here = 1
      table.remove(batch, 1)
    elseif most and #batch > most then
      table.remove(batch)
    end
  else
    here = #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
  end
elseif reading then
  batch = range('-', ARGV[4], most)
end
if ARGV[3] ~= 'always' and (ARGV[1] == '' or here == 1) then
  return {fields['entries-added'] or -1, fields['length'], first,
          fields['max-deleted-entry-id'] or '', here, 0, '', 0, batch}
end
local after = range(low, '+', ARGV[2])
local oldest = ''
if #after > 0 then oldest = after[1][1] end
return {fields['entries-added'] or -1, fields['length'], first,
        fields['max-deleted-entry-id'] or '', here, #after, oldest, 1, batch}
