-- Argo CD health of a nodewise.io RevisionMigration, read from status.phase:
-- under way, gating or aborting is Progressing, paused by a person
-- Suspended, halted, refused or aborted Degraded (a person acts next),
-- succeeded Healthy. It uses Argo CD's default libraries only (no string).
local hs = {}
local st = obj.status
if st == nil or st.observedGeneration == nil or tonumber(st.observedGeneration) ~= tonumber(obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the revisions controller to observe the migration's spec"
  return hs
end

local phase = st.phase
if phase == nil or phase == "" then
  phase = "Pending"
end
local health = ({
  Pending = "Progressing", Progressing = "Progressing", Gating = "Progressing", Aborting = "Progressing",
  Paused = "Suspended",
  Halted = "Degraded", Refused = "Degraded", Aborted = "Degraded",
  Succeeded = "Healthy",
})[phase]
if health == nil then
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. phase .. ": this health check is older than the revisions controller"
  return hs
end
hs.status = health
hs.message = phase
if st.reason ~= nil and st.reason ~= "" then
  hs.message = phase .. ": " .. st.reason
end
return hs
