-- ARGV[2..] tables: every pin entry of them, expired ones dropped, and Redis's clock
local out = {'OK', string.format('%.0f', now)}
for i = 2, #ARGV do
  local t = ARGV[i]
  local entries = redis.call('HGETALL', k_pins(t))
  for j = 1, #entries, 2 do
    local expires = string.match(entries[j + 1], '^[^|]*|[^|]*|([^|]*)|')
    if tonumber(expires) <= now then
      drop_pin(entries[j], t, nil)
    else
      out[#out + 1] = t
      out[#out + 1] = entries[j]
      out[#out + 1] = entries[j + 1]
    end
  end
end
return out
