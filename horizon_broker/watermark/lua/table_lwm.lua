-- The table's LWM from its two sorted sets: the first active member, and the quiet members
-- raised to their clocks (scanned in order until no later one can be lower). Returns
-- {lwm, partition, owner, state} or nil when nothing counts.
local function table_lwm(t, now)
  local best, best_p, best_owner, best_state = nil, nil, '', ''
  local first = redis.call('ZRANGE', k_lwm(t), 0, 0)
  if #first > 0 then
    local lwm, p = string.match(first[1], '^(%d+):(%d+)$')
    best, best_p, best_state = lwm, p, 'active'
  end
  local start = 0
  while true do
    local members = redis.call('ZRANGE', k_quiet(t), start, start + 63)
    if #members == 0 then break end
    for _, member in ipairs(members) do
      local lwm, p = string.match(member, '^(%d+):(%d+)$')
      if best ~= nil and lwm >= best then return {best, best_p, best_owner, best_state} end
      local f = entry_of(redis.call('HGET', k_prog(t), tostring(tonumber(p))))
      local value = effective(f, now)
      if value ~= '' and (best == nil or pad(value) < best) then
        best, best_p, best_owner, best_state = pad(value), p, f[1], f[6]
      end
    end
    start = start + 64
  end
  if best == nil then return nil end
  if best_state == 'active' then
    local f = entry_of(redis.call('HGET', k_prog(t), tostring(tonumber(best_p))))
    best_owner = f[1]
  end
  return {best, best_p, best_owner, best_state}
end
