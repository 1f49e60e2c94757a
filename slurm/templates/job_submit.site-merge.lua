--[[
A site's own job_submit.lua merged with lyasched's plugin (docs/service.md, "A site with its own
job_submit.lua"). Slurm runs one job_submit.lua, so:

  1. install lyasched's plugin (slurm/job_submit.lua) as lyasched_job_submit.lua in the directory
     of slurm.conf, with the service account's uid in its PRIVILEGED_UIDS;
  2. in the site's file, rename its two functions to site_job_submit and site_job_modify (below,
     an example: a default time limit, a top priority for one account, a job name the site
     refuses), and append the part after "lyasched" below;
  3. install that file as job_submit.lua (slurmctld reloads it when its mtime changes).

The order is what keeps lyasched jobs held: at submission the site's rules run first and
lyasched's last, so its validation and its hold (priority 0) stand whatever the site set; on a
change lyasched's refusal comes first, so no site rule can let an owner release a lyasched job.
The site's rules must leave a job's comment as it is (it carries lyasched's cost summary).
tests/test_job_submit_lua.py runs this file under lua with a stand-in for Slurm's table;
tests/test_job_submit_merged.py (marker slurm) installs it on the test cluster.
--]]

-- ---------------------------------------------------------------- the site's rules (an example)

local SITE_DEFAULT_TIME = 60 -- minutes, for jobs submitted without --time

local function site_job_submit(job_desc, part_list, submit_uid)
	if job_desc.name == "refused-by-site" then
		slurm.log_user("site: this job name is not allowed here")
		return slurm.ERROR
	end
	if job_desc.time_limit == nil or job_desc.time_limit == slurm.NO_VAL then
		job_desc.time_limit = SITE_DEFAULT_TIME
	end
	if job_desc.account == "urgent" then
		job_desc.priority = 1000000 -- lyasched's hold, applied after this, still wins for its jobs
	end
	return slurm.SUCCESS
end

local function site_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

-- ---------------------------------------------------------------- lyasched (keep as it is)

local here = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "/etc/slurm"
dofile(here .. "/lyasched_job_submit.lua")
local lyasched_job_submit, lyasched_job_modify = slurm_job_submit, slurm_job_modify

function slurm_job_submit(job_desc, part_list, submit_uid)
	local rc = site_job_submit(job_desc, part_list, submit_uid)
	if rc ~= slurm.SUCCESS then
		return rc
	end
	return lyasched_job_submit(job_desc, part_list, submit_uid) -- last: its hold stands
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	local rc = lyasched_job_modify(job_desc, job_rec, part_list, modify_uid) -- first: its refusal stands
	if rc ~= slurm.SUCCESS then
		return rc
	end
	return site_job_modify(job_desc, job_rec, part_list, modify_uid)
end

return slurm.SUCCESS
