--[[
lyasched job_submit plugin (Slurm 22.05+, JobSubmitPlugins=lua; install as job_submit.lua next to
slurm.conf).

A job whose comment starts with "lyasched:v1;" carries a cost summary (docs/cost-summary.md). This
plugin
  * rejects the job at submission if the summary is malformed, with a one-line reason to the user;
  * holds a valid one (priority 0, set by the plugin running as SlurmUser: an admin hold), so that
    only the lyasched service decides when, and on how many GPUs, it starts;
  * refuses every modification of a lyasched job by anybody but a privileged uid (the owner may
    still scancel it), and refuses to tag an existing job after submission (that would skip the
    validation and the hold).
Jobs without the prefix are left alone. lyasched/summary.py enforces the same grammar in Python.
--]]

local PREFIX = "lyasched:v1;"
local MAX_LEN = 1024

-- uids allowed to release / resize / modify lyasched jobs: root, SlurmUser and the account that
-- runs `lyasched serve`. Add them here when SlurmUser or the service account is not root.
local PRIVILEGED_UIDS = { [0] = true }

-- Lexical forms, exactly as lyasched/summary.py: int -?[0-9]{1,20};
-- float -?[0-9]{1,40}(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})? (no '+', no nan/inf/hex, no ".5" or "5.").
local function parse_int(s)
	local digits = s:match("^%-?(%d+)$")
	if digits == nil or #digits > 20 then
		return nil
	end
	return tonumber(s)
end

local function parse_float(s)
	local int, tail = s:match("^%-?(%d+)(.*)$")
	if int == nil or #int > 40 then
		return nil
	end
	local frac, after = tail:match("^%.(%d+)(.*)$")
	if frac ~= nil then
		if #frac > 40 then
			return nil
		end
		tail = after
	end
	if tail ~= "" then
		local exp = tail:match("^[eE][%+%-]?(%d+)$")
		if exp == nil or #exp > 3 then
			return nil
		end
	end
	return tonumber(s)
end

local function int_field(lo, hi)
	return function(v)
		local x = parse_int(v)
		if x == nil then
			return nil, "must be an integer"
		end
		if x < lo or x > hi then
			return nil, string.format("must be in %d..%.0f", lo, hi)
		end
		return x
	end
end

local function float_field(lo, hi)
	return function(v)
		local x = parse_float(v)
		if x == nil then
			return nil, "must be a decimal number"
		end
		if x < lo or x > hi then
			return nil, string.format("must be in %g..%g", lo, hi)
		end
		return x
	end
end

local function word_field(pattern, charset, lo, hi)
	return function(v)
		if #v < lo or #v > hi or not v:match(pattern) then
			return nil, string.format("must be %d..%d characters of %s", lo, hi, charset)
		end
		return v
	end
end

local FIELDS = {
	id = word_field("^[%w%-]+$", "A-Z a-z 0-9 -", 8, 64),
	sig = word_field("^[%w_%.:%-]+$", "A-Z a-z 0-9 _ . : -", 1, 128),
	b = int_field(1, 1048576),
	it = int_field(1, 1000000000),
	gmin = int_field(1, 1024),
	gmax = int_field(1, 1024),
	a = float_field(0, 1000),
	bt = float_field(0, 1000),
	p = int_field(1, 1000000000000),
	bpp = int_field(1, 8),
	m0 = float_field(0, 1e13),
	m1 = float_field(0, 1e12),
	src = function(v)
		if v == "m" or v == "e" then
			return v
		end
		return nil, "must be m or e"
	end,
	ck = int_field(1, 1), -- optional (not in ORDER): the job is checkpointable (lyasub --checkpointable)
}
local ORDER = { "id", "sig", "b", "it", "gmin", "gmax", "a", "bt", "p", "bpp", "m0", "m1", "src" }

local function starts_with(s, prefix)
	return s ~= nil and s:sub(1, #prefix) == prefix
end

-- Returns the decoded summary table, or nil and a reason.
local function validate(summary)
	if #summary > MAX_LEN then
		return nil, string.format("longer than %d characters", MAX_LEN)
	end
	local body = summary:sub(#PREFIX + 1)
	if body == "" then
		return nil, "no fields"
	end
	local seen = {}
	for field in (body .. ";"):gmatch("([^;]*);") do
		if field == "" then
			return nil, "empty field (stray ';')"
		end
		local key, value = field:match("^([^=]*)=(.*)$")
		if key == nil then
			return nil, string.format("field '%s' is not key=value", field)
		end
		if not key:match("^[a-z0-9_]+$") then
			return nil, string.format("bad key '%s'", key)
		end
		local check = FIELDS[key]
		if check == nil then
			return nil, string.format("unknown key '%s'", key)
		end
		if seen[key] ~= nil then
			return nil, string.format("key '%s' given twice", key)
		end
		local parsed, why = check(value)
		if parsed == nil then
			return nil, string.format("%s=%s: %s", key, value, why)
		end
		seen[key] = parsed
	end
	for _, key in ipairs(ORDER) do
		if seen[key] == nil then
			return nil, string.format("missing key '%s'", key)
		end
	end
	if seen.gmax < seen.gmin then
		return nil, string.format("gmax=%d is below gmin=%d", seen.gmax, seen.gmin)
	end
	return seen
end

-- Whether a comment claims to be a lyasched summary. Surrounding whitespace does not hide the claim
-- (lyasched/summary.py strips it when reading), so such a comment is validated, and rejected.
local function claims_lyasched(comment)
	return comment ~= nil and starts_with(comment:match("^%s*(.*)$"), PREFIX)
end

-- A line break (or any control character, or a Unicode line separator, which Python's splitlines
-- honours) in a job name or comment would split that job's line in `squeue -o` output and make
-- every slot of `lyasched serve` fail to parse the queue: any user could stop the scheduler.
-- Refused for every job, lyasched's or not, at submission and on update.
local LINE_BREAKERS = { "\194\133", "\226\128\168", "\226\128\169" } -- U+0085, U+2028, U+2029

local function breaks_lines(s)
	if s == nil then
		return false
	end
	if s:find("%c") then
		return true
	end
	for _, seq in ipairs(LINE_BREAKERS) do
		if s:find(seq, 1, true) then
			return true
		end
	end
	return false
end

local function refuse_line_breaks(job_desc)
	if breaks_lines(job_desc.name) or breaks_lines(job_desc.comment) then
		slurm.log_user("lyasched: job names and comments must not contain control characters or line separators")
		return true
	end
	return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if refuse_line_breaks(job_desc) then
		return slurm.ERROR
	end
	local comment = job_desc.comment
	if not claims_lyasched(comment) then
		return slurm.SUCCESS
	end
	local summary, why
	if comment:match("^%s") or comment:match("%s$") then
		why = "leading or trailing whitespace"
	else
		summary, why = validate(comment)
	end
	if summary == nil then
		slurm.log_user("lyasched: invalid cost summary in --comment: %s", why)
		slurm.log_info("lyasched: rejected job from uid %u: %s", submit_uid, why)
		return slurm.ERROR
	end
	-- Held until `lyasched serve` sizes and releases it.
	job_desc.priority = 0
	-- Not requeueable: otherwise its owner could `scontrol requeue` it after release and it would
	-- start again without the scheduler deciding (requeue does not go through slurm_job_modify).
	job_desc.requeue = 0
	slurm.log_info("lyasched: holding job %s (id=%s) from uid %u", tostring(job_desc.name), summary.id, submit_uid)
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if refuse_line_breaks(job_desc) then
		return slurm.ERROR
	end
	if PRIVILEGED_UIDS[modify_uid] then
		return slurm.SUCCESS
	end
	if claims_lyasched(job_rec.comment) then
		slurm.log_user(
			"lyasched: job %u is managed by lyasched: only the scheduler may release or change it (scancel still works)",
			job_rec.job_id
		)
		return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
	end
	if claims_lyasched(job_desc.comment) then
		slurm.log_user("lyasched: a job cannot become a lyasched job after submission; submit it with lyasub")
		return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
	end
	return slurm.SUCCESS
end

slurm.log_info("lyasched job_submit.lua loaded")
return slurm.SUCCESS
