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

-- A --constraint lyasched can place by (lyasched.policy.placement): feature names (A-Z a-z 0-9 _ . -)
-- joined by & (all) and | (any), at most 256 characters; nil for anything else (brackets, counts, !).
local function constraint_text(v)
	if v == nil or #v < 1 or #v > 256 then
		return nil
	end
	for name in (v:gsub("|", "&") .. "&"):gmatch("([^&]*)&") do
		if not name:match("^[%w_%.%-]+$") then
			return nil
		end
	end
	return v
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
	-- optional, together (not in ORDER): an adaptive batch (lyasub --adaptive-batch): largest global batch, learning-rate rule
	mb = int_field(1, 1048576),
	lr = function(v)
		if v == "linear" or v == "sqrt" or v == "adascale" then
			return v
		end
		return nil, "must be linear, sqrt or adascale"
	end,
	pl = int_field(1, 1), -- optional: a plain job of a managed partition, tagged by this plugin (no profile)
	cb = int_field(1, 1048576), -- optional, the service's: an adaptive job's batch for its (re)start (with mb)
	kn = float_field(0, 1048576), -- optional: per-GPU batch up to which the step time is flat (the profile's knee)
	-- optional: the GPU types the job may run on (lyasub --gpu-type a100,h100): 1..8 distinct names,
	-- each 1-32 of A-Z a-z 0-9 _ . - starting with a letter or digit, not a bare number
	gt = function(v)
		local seen, n = {}, 0
		for name in (v .. ","):gmatch("([^,]*),") do
			if #name < 1 or #name > 32 or not name:match("^[%w][%w_%.%-]*$") or name:match("^%d+$") then
				return nil, "must be up to 8 distinct GPU types (A-Z a-z 0-9 _ . -), comma-separated"
			end
			if seen[name] then
				return nil, string.format("GPU type '%s' given twice", name)
			end
			seen[name] = true
			n = n + 1
		end
		if n > 8 then
			return nil, "more than 8 GPU types"
		end
		return v
	end,
	-- optional: the job's --constraint (node features joined by & and |), written with / for |; it
	-- must be the job's own Features (checked in slurm_job_submit)
	ft = function(v)
		if v:find("|", 1, true) or constraint_text((v:gsub("/", "|"))) == nil then
			return nil, "must be node features (A-Z a-z 0-9 _ . -) joined by & and /"
		end
		return (v:gsub("/", "|"))
	end,
	-- optional: the GPU type the profile is of (lyasub profiles on the fastest type the job allows)
	pt = function(v)
		if #v < 1 or #v > 32 or not v:match("^[%w][%w_%.%-]*$") or v:match("^%d+$") then
			return nil, "must be a GPU type (A-Z a-z 0-9 _ . -)"
		end
		return v
	end,
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
	if (seen.mb == nil) ~= (seen.lr == nil) then
		return nil, "mb and lr go together (both or neither)"
	end
	if seen.cb ~= nil and (seen.mb == nil or seen.cb > seen.mb) then
		return nil, "cb needs mb and must be at most mb"
	end
	if seen.mb ~= nil and seen.mb < seen.b then
		return nil, string.format("mb=%d is below b=%d", seen.mb, seen.b)
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

--[[ Managed partitions (docs/managed.md): every batch job with GPUs submitted to one of them, by any
tool (sbatch, submitit, dask-jobqueue, a portal), is taken by lyasched at submission: tagged with a
summary built from its request (rigid: its GPU count) and held like a lyasub job. Interactive
allocations (srun/salloc: no batch script) and jobs of the pass-through accounts are left alone.
The list lives in lyasched-managed.conf next to this file, read at each submission (no restart):
    partitions = gpu,big
    pass_accounts = admins
    max_gpus_per_node = 8
    max_gpus = 64
A held job skips Slurm's own check that some nodes can ever satisfy it, so the last two stand in for
it: a request beyond them is rejected at submission, as Slurm rejects it outside a managed partition.
--]]
local MANAGED_CONF = "lyasched-managed.conf"

local function conf_dir()
	local src = debug.getinfo(1, "S").source
	return (src:match("^@(.*)/[^/]*$")) or "/etc/slurm"
end

local function split_set(text)
	local set = {}
	for word in (text or ""):gmatch("[^,%s]+") do
		set[word] = true
	end
	return set
end

local function managed_conf()
	local f = io.open(conf_dir() .. "/" .. MANAGED_CONF, "r")
	local conf = { partitions = {}, pass_accounts = {}, max_gpus_per_node = nil, max_gpus = nil }
	if f == nil then
		return conf
	end
	for line in f:lines() do
		local key, value = line:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
		if key == "partitions" or key == "pass_accounts" then
			conf[key] = split_set(value)
		elseif key == "max_gpus_per_node" or key == "max_gpus" then
			conf[key] = tonumber(value)
		end
	end
	f:close()
	return conf
end

local function is_set(v)
	return v ~= nil and v ~= slurm.NO_VAL and v ~= slurm.NO_VAL16 and v ~= 4294967294 and v ~= 65534 and v ~= 0
end

-- GPUs a request asks for in all (0: none): --gpus (per job), --gres/--gpus-per-node (per node x
-- nodes), --gpus-per-task (x tasks). Typed requests (gres:gpu:a100:2) count too.
local function gpu_count(spec)
	if spec == nil then
		return 0
	end
	local total = 0
	for item in spec:gmatch("[^,]+") do
		if item:match("gpu") then
			local n = item:match(":(%d+)$") or item:match("=(%d+)$")
			total = total + (tonumber(n) or 1)
		end
	end
	return total
end

-- Returns the GPUs in all and, when the request fixes it, per node.
local function requested_gpus(job_desc)
	local per_job = gpu_count(job_desc.tres_per_job)
	if per_job > 0 then
		return per_job, nil
	end
	local per_node = gpu_count(job_desc.tres_per_node)
	if per_node > 0 then
		local nodes = is_set(job_desc.min_nodes) and job_desc.min_nodes or 1
		return per_node * nodes, per_node
	end
	local per_task = gpu_count(job_desc.tres_per_task)
	if per_task > 0 then
		local tasks = is_set(job_desc.num_tasks) and job_desc.num_tasks or 1
		return per_task * tasks, nil
	end
	return 0, nil
end

-- The partition a job goes to: its own, or the default one of those it may use.
local function target_partitions(job_desc, part_list)
	local out = {}
	if job_desc.partition ~= nil and job_desc.partition ~= "" then
		for name in job_desc.partition:gmatch("[^,]+") do
			out[#out + 1] = name
		end
		return out
	end
	for name, part in pairs(part_list or {}) do
		if part.flag_default == 1 or part.flag_default == true then
			out[#out + 1] = part.name or name
		end
	end
	return out
end

local function random_id()
	local t = {}
	for i = 1, 8 do
		t[i] = string.format("%04x", math.random(0, 65535))
	end
	return "m" .. table.concat(t)
end

-- Returns "take" (tag and hold), "pass" (leave alone), or nil and a reason (reject).
local function managed_decision(job_desc, part_list)
	local conf = managed_conf()
	if next(conf.partitions) == nil then
		return "pass"
	end
	local parts = target_partitions(job_desc, part_list)
	local inside, outside = 0, 0
	for _, name in ipairs(parts) do
		if conf.partitions[name] then
			inside = inside + 1
		else
			outside = outside + 1
		end
	end
	if inside == 0 then
		return "pass"
	end
	if job_desc.script == nil or job_desc.script == "" then
		return "pass" -- interactive: srun/salloc without a batch script
	end
	if job_desc.account ~= nil and conf.pass_accounts[job_desc.account] then
		return "pass"
	end
	local gpus, per_node = requested_gpus(job_desc)
	if gpus == 0 then
		return "pass"
	end
	local unavailable = "Requested node configuration is not available"
	if per_node ~= nil and conf.max_gpus_per_node ~= nil and per_node > conf.max_gpus_per_node then
		return nil, string.format("%s: %d GPUs per node, the managed partitions' nodes have at most %d",
			unavailable, per_node, conf.max_gpus_per_node)
	end
	if conf.max_gpus ~= nil and gpus > conf.max_gpus then
		return nil, string.format("%s: %d GPUs, the managed partitions have %d", unavailable, gpus, conf.max_gpus)
	end
	if outside > 0 then
		return nil, "a job with GPUs cannot list a managed partition together with others; submit to one"
	end
	if gpus > 1024 then
		return nil, string.format("%d GPUs is more than lyasched schedules (1024)", gpus)
	end
	if job_desc.comment ~= nil and job_desc.comment ~= "" then
		return nil, "--comment is reserved for the scheduler in a managed partition; submit without it"
	end
	return "take", gpus
end

-- A key of what the batch script runs: two polynomial hashes (exact in Lua 5.1's doubles) of its
-- non-blank lines that are not comments or #SBATCH directives, so the same script submitted again
-- (other names, outputs, resources) has the same key. lyasched.live.plain.script_of reads it from
-- sig=plain:<16 hex> and estimates the job from its user's earlier runs of that script first.
local function script_key(script)
	local h1, h2, n = 0, 0, 0
	for line in (script or ""):gmatch("[^\n]+") do
		local body = line:match("^%s*(.-)%s*$")
		if body ~= "" and body:sub(1, 1) ~= "#" then
			for i = 1, #body do
				local c = body:byte(i)
				h1 = (h1 * 31 + c) % 2147483647
				h2 = (h2 * 37 + c) % 2147483629
			end
			h1 = (h1 * 31 + 10) % 2147483647
			h2 = (h2 * 37 + 10) % 2147483629
			n = n + 1
		end
	end
	if n == 0 then
		return nil
	end
	return string.format("%08x%08x", h1, h2)
end

local function plain_summary(gpus, script, features)
	local key = script_key(script)
	return string.format(
		"%sid=%s;sig=plain%s;b=%d;it=1;gmin=%d;gmax=%d;a=0;bt=0;p=1;bpp=4;m0=0;m1=0;src=e;pl=1%s",
		PREFIX, random_id(), key and (":" .. key) or "", gpus, gpus, gpus,
		features and (";ft=" .. features:gsub("|", "/")) or ""
	)
end

local function hold(job_desc)
	-- Held until `lyasched serve` sizes and releases it.
	job_desc.priority = 0
	-- Not requeueable: otherwise its owner could `scontrol requeue` it after release and it would
	-- start again without the scheduler deciding (requeue does not go through slurm_job_modify).
	job_desc.requeue = 0
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if refuse_line_breaks(job_desc) then
		return slurm.ERROR
	end
	local comment = job_desc.comment
	if not claims_lyasched(comment) then
		local what, gpus = managed_decision(job_desc, part_list)
		if what == nil then
			slurm.log_user("lyasched: %s", gpus)
			return slurm.ERROR
		end
		if what == "take" then
			local features = job_desc.features
			if features ~= nil and features ~= "" and constraint_text(features) == nil then
				slurm.log_user("lyasched: --constraint %s: a managed partition supports node features joined by & and | only", features)
				return slurm.ERROR
			end
			job_desc.comment = plain_summary(gpus, job_desc.script, features ~= "" and features or nil)
			hold(job_desc)
			slurm.log_info("lyasched: taking job %s (%d GPUs) from uid %u in a managed partition",
				tostring(job_desc.name), gpus, submit_uid)
		end
		return slurm.SUCCESS
	end
	local summary, why
	if comment:match("^%s") or comment:match("%s$") then
		why = "leading or trailing whitespace"
	else
		summary, why = validate(comment)
	end
	if summary ~= nil and (summary.ft or "") ~= (job_desc.features or "") then
		summary, why = nil, string.format("ft=%s is not the job's --constraint (%s)",
			summary.ft and summary.ft:gsub("|", "/") or "(none)", job_desc.features or "none")
	end
	if summary == nil then
		slurm.log_user("lyasched: invalid cost summary in --comment: %s", why)
		slurm.log_info("lyasched: rejected job from uid %u: %s", submit_uid, why)
		return slurm.ERROR
	end
	hold(job_desc)
	slurm.log_info("lyasched: holding job %s (id=%s) from uid %u", tostring(job_desc.name), summary.id, submit_uid)
	return slurm.SUCCESS
end

-- What an owner's update of a lyasched job may not touch: the hold and priority (a release), what
-- the scheduler decided or will decide (GPUs, nodes, tasks, partition, account and QOS, when it may
-- start, a longer time limit), and the summary. Anything else (its name, a shorter time limit,
-- mail settings) is the owner's, under Slurm's usual rules. The fields cannot be listed from Lua, so this names them.
local DECIDED_TEXT = {
	"comment", "admin_comment", "partition", "account", "qos", "reservation", "features", "prefer",
	"batch_features", "gres", "tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task",
	"cpus_per_tres", "mem_per_tres", "tres_bind", "req_nodes", "exc_nodes", "dependency", "licenses",
	"array_inx", "clusters", "burst_buffer", "work_dir", "std_out", "std_err", "std_in", "script",
}
local DECIDED_NUMBER = {
	"nice", "min_nodes", "max_nodes", "num_tasks", "min_cpus", "max_cpus", "pn_min_cpus", "cpus_per_task",
	"ntasks_per_node", "ntasks_per_gpu", "ntasks_per_tres", "ntasks_per_socket", "sockets_per_node",
	"cores_per_socket", "threads_per_core", "pn_min_memory", "min_mem_per_cpu", "min_mem_per_node",
	"pn_min_tmp_disk", "begin_time", "requeue", "shared", "contiguous", "reboot", "delay_boot",
	"site_factor",
}

local function decided_field(job_desc, job_rec)
	-- a longer time limit widens what the scheduler planned with (a shorter one only ends the job sooner)
	local limit, now = job_desc.time_limit, job_rec.time_limit
	if is_set(limit) and (limit == 4294967295 or (now ~= nil and now ~= 4294967295 and limit > now)) then
		return "time limit (only a shorter one)"
	end
	-- the priority, 0 included: a hold or a release either way
	local prio = job_desc.priority
	if prio ~= nil and prio ~= slurm.NO_VAL and prio ~= 4294967294 then
		return "priority (hold or release)"
	end
	for _, key in ipairs(DECIDED_TEXT) do
		if job_desc[key] ~= nil then
			return key
		end
	end
	for _, key in ipairs(DECIDED_NUMBER) do
		local v = job_desc[key]
		if is_set(v) and v ~= 18446744073709551614 and v ~= 18446744073709551615 then -- NO_VAL64, INFINITE64
			return key
		end
	end
	return nil
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if refuse_line_breaks(job_desc) then
		return slurm.ERROR
	end
	if PRIVILEGED_UIDS[modify_uid] then
		return slurm.SUCCESS
	end
	if claims_lyasched(job_rec.comment) then
		local field = decided_field(job_desc, job_rec)
		if field == nil then
			return slurm.SUCCESS -- its name, a shorter time limit, mail: Slurm's own rules apply
		end
		slurm.log_user(
			"lyasched: job %u is managed by lyasched: only the scheduler may release it or change its %s (scancel, and its name, time limit and mail settings, still work)",
			job_rec.job_id, field
		)
		return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
	end
	if claims_lyasched(job_desc.comment) then
		slurm.log_user("lyasched: a job cannot become a lyasched job after submission; submit it with lyasub")
		return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
	end
	return slurm.SUCCESS
end

math.randomseed(os.time())
slurm.log_info("lyasched job_submit.lua loaded")
return slurm.SUCCESS
