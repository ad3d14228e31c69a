-- wrk script: POSTs uniquely named copies of bench/pod.json.
-- Used for skiff (Kubernetes create) and etcd (JSON gateway put) alike.
local threads = {}
local next_id = 0

function setup(thread)
   thread:set("tid", next_id)
   next_id = next_id + 1
   table.insert(threads, thread)
end

local b64chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local function b64(data)
   return ((data:gsub('.', function(x)
      local r, b = '', x:byte()
      for i = 8, 1, -1 do r = r .. (b % 2 ^ i - b % 2 ^ (i - 1) > 0 and '1' or '0') end
      return r
   end) .. '0000'):gsub('%d%d%d?%d?%d?%d?', function(x)
      if #x < 6 then return '' end
      local c = 0
      for i = 1, 6 do c = c + (x:sub(i, i) == '1' and 2 ^ (6 - i) or 0) end
      return b64chars:sub(c + 1, c + 1)
   end) .. ({ '', '==', '=' })[#data % 3 + 1])
end

function init(args)
   mode = args[1]           -- "skiff" or "etcd"
   local f = assert(io.open(args[2], "r"))
   template = f:read("*a"):gsub("%s+$", "")
   f:close()
   counter = 0
   if mode == "etcd" then
      value64 = b64(template)
   end
end

request = function()
   counter = counter + 1
   local name = string.format("bench-%d-%d", tid, counter)
   if mode == "etcd" then
      local body = '{"key":"' .. b64("/registry/pods/default/" .. name) .. '","value":"' .. value64 .. '"}'
      return wrk.format("POST", nil, nil, body)
   end
   return wrk.format("POST", nil, nil, (template:gsub('"name":"NAME"', '"name":"' .. name .. '"')))
end
