-- Argo CD health of a nodewise.io NodeRollout, read from status.phase:
-- under way or waiting is Progressing, paused by a person Suspended,
-- halted, invalid or aborted Degraded (a person acts next), completed,
-- rolled back or (a standing policy between runs) idle Healthy. A target
-- DaemonSet off OnDelete (condition OnDelete False) is Degraded whatever
-- the phase: no node starts until the chart is fixed. It uses Argo CD's
-- default libraries only (no string).
local hs = {}
local st = obj.status
if st == nil or st.observedGeneration == nil or tonumber(st.observedGeneration) ~= tonumber(obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the orchestrator to observe the rollout's spec"
  return hs
end

-- why is the message of the condition that says why the rollout is in its
-- phase: the one of Ready, Reconciling and Stalled that is True.
local function why()
  if st.conditions == nil then
    return nil
  end
  for _, c in ipairs(st.conditions) do
    if (c.type == "Reconciling" or c.type == "Stalled" or c.type == "Ready") and c.status == "True" and c.message ~= nil and c.message ~= "" then
      return c.message
    end
  end
  return nil
end

if st.conditions ~= nil then
  for _, c in ipairs(st.conditions) do
    if c.type == "OnDelete" and c.status == "False" then
      hs.status = "Degraded"
      hs.message = c.message
      return hs
    end
  end
end

local phase = st.phase
if phase == nil or phase == "" then
  phase = "Pending"
end
local health = ({
  Pending = "Progressing", Progressing = "Progressing", WaitingForWindow = "Progressing", RollingBack = "Progressing",
  Paused = "Suspended",
  Halted = "Degraded", Failed = "Degraded", Aborted = "Degraded",
  Completed = "Healthy", RolledBack = "Healthy", Idle = "Healthy",
})[phase]
if health == nil then
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. phase .. ": this health check is older than the orchestrator"
  return hs
end
hs.status = health

local message = phase
if phase == "Halted" and st.haltReason ~= nil and st.haltReason ~= "" then
  message = st.haltReason -- the halt's headline, as `nodewise status` prints it
else
  local reason = why()
  if reason ~= nil then
    message = phase .. ": " .. reason
  end
end
if st.runs ~= nil and st.runs[1] ~= nil then
  message = message .. "; run " .. tostring(st.runs[1].run) .. " " .. tostring(st.runs[1].outcome)
end
local total = st.counts ~= nil and tonumber(st.counts.total) or nil
if total ~= nil and total > 0 then
  message = message .. " (" .. (tonumber(st.counts.done) or 0) .. "/" .. total .. " nodes done)"
end
hs.message = message
return hs
