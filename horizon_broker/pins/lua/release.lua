-- ARGV[2] pin id, ARGV[3] caller
local info = pin_info(ARGV[2])
if not info then return {'OK', '0'} end
local refused = not_owner(ARGV[2], info, ARGV[3])
if refused then return refused end
drop_pin(ARGV[2])
return {'OK', '1'}
