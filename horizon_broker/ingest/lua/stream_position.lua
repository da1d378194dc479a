-- Where a table's offset ARGV[1] ('' for none) stands in stream KEYS[1], in one call: the
-- stream's entries ever added, length, first entry id and last deleted id (XINFO STREAM, Redis
-- 7), whether the offset's entry is still there, and the entries after it (at most ARGV[2])
-- counted in Redis with the first one's id. The count is the costly part (up to ARGV[2] entries
-- walked): ARGV[3] = 'always' counts, 'if-gone' counts only when the offset's entry is gone (the
-- one case a trim check needs it), so a pass counts once (its lag). The last value says whether
-- it counted. A missing key is an empty stream; a key of another type fails (WRONGTYPE). Fields
-- Redis 6 lacks come back as -1 / ''.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, '', '0-0', 0, 0, '', 1} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local fields = {}
for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
local first = ''
if type(fields['first-entry']) == 'table' then first = fields['first-entry'][1] end
local low, here = '-', 0
if ARGV[1] ~= '' then
  low = '(' .. ARGV[1]
  here = #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
end
if ARGV[3] ~= 'always' and (ARGV[1] == '' or here == 1) then
  return {fields['entries-added'] or -1, fields['length'], first,
          fields['max-deleted-entry-id'] or '', here, 0, '', 0}
end
local after = redis.call('XRANGE', KEYS[1], low, '+', 'COUNT', ARGV[2])
local oldest = ''
if #after > 0 then oldest = after[1][1] end
return {fields['entries-added'] or -1, fields['length'], first,
        fields['max-deleted-entry-id'] or '', here, #after, oldest, 1}
