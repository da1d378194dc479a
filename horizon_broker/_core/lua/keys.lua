local P = ARGV[1]
local K_EPOCH = P .. ':epoch'
local K_SEQ = P .. ':seq'
local K_LOG = P .. ':log'
local K_TABLES = P .. ':tables'
local K_SERVERS = P .. ':servers'
local K_HB = P .. ':hb'
local K_HBCLOCK = P .. ':hbclock'
local K_PUBLISHED_ON = P .. ':publishedon'
local K_CLOCK = P .. ':clock'
local K_LAST = P .. ':last'
local K_FLOOR = P .. ':floor'
local function k_segs(t) return P .. ':t:' .. t .. ':segs' end
local function k_prog(t) return P .. ':t:' .. t .. ':prog' end
local function k_lwm(t) return P .. ':t:' .. t .. ':lwm' end
local function k_quiet(t) return P .. ':t:' .. t .. ':quiet' end
local function k_ret(t) return P .. ':t:' .. t .. ':ret' end
local function k_pending(t) return P .. ':t:' .. t .. ':pending' end
local function k_alloc(t) return P .. ':t:' .. t .. ':alloc' end
local function k_locks(t) return P .. ':t:' .. t .. ':locks' end
local function k_majors(t) return P .. ':t:' .. t .. ':majors' end
local function k_pins(t) return P .. ':t:' .. t .. ':pins' end
local function k_pinexp(t) return P .. ':t:' .. t .. ':pinexp' end
local function k_pinowner(o) return P .. ':pinowner:' .. o end
local K_PINS = P .. ':pins'
local function pad(hlc) return string.rep('0', 20 - #hlc) .. hlc end
