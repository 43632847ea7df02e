-- natm over UDP, and Linux's atmtcp link over TCP: Wireshark dissectors (docs/wire.md).
--
-- Load it for one run:    tshark -X lua_script:contrib/wireshark/natm.lua -r FILE
-- or for good: copy it into Wireshark's personal Lua plugins folder
-- (Help > About Wireshark > Folders; ~/.local/lib/wireshark/plugins/ on Linux).
--
-- natm runs over UDP on ports it picks at run time, so this is a heuristic
-- dissector on UDP. It claims a datagram that is
--   * a VC frame: first octet 0xC0-0xCF (magic 0xC), kind not 3, a VCI other than
--     0, and an SDU that fits its kind: a whole number of 4-octet words for
--     signalling (SSCOP), a 32-octet TPDU header of version 1 for data; or
--   * a cell train: 0xD1, then N >= 1 whole 53-octet cells.
-- Signalling SDUs go to Wireshark's SSCOP dissector (and from there to Q.2931),
-- except switches' routing frames on VPI 0/VCI 18 (hello, PTSE, ack; issue 33);
-- data SDUs are shown as TPDUs (docs/wire.md "The TPDU header"); OAM probes as bytes.

local natm = Proto("natm", "natm over UDP")

local kinds = { [0] = "data", [1] = "signalling", [2] = "oam", [3] = "reserved" }
local tpdu_types = {
    [0] = "DATA", [1] = "ACK", [2] = "CONN-REQ", [3] = "CONN-ACCEPT",
    [4] = "CONN-CONFIRM", [5] = "CLOSE", [6] = "CLOSE-ACK", [7] = "ABORT",
    [8] = "SYNC", [9] = "SYNC-ECHO", [10] = "QOS", [11] = "QOS-ACK",
}

local routing_types = { [1] = "hello", [2] = "PTSE", [3] = "ack" }
local ROUTING_VCI = 18

local f = natm.fields
-- The VC header (docs/wire.md "The UDP adaptor's VC header").
f.magic = ProtoField.uint8("natm.magic", "Magic", base.HEX, nil, 0xF0)
f.kind = ProtoField.uint8("natm.kind", "Kind", base.DEC, kinds, 0x0C)
f.ci = ProtoField.bool("natm.ci", "Congestion indication (EFCI)", 8, nil, 0x02)
f.clp = ProtoField.bool("natm.clp", "Cell loss priority", 8, nil, 0x01)
f.vpi = ProtoField.uint8("natm.vpi", "VPI", base.DEC)
f.vci = ProtoField.uint16("natm.vci", "VCI", base.DEC)
f.sdu = ProtoField.bytes("natm.sdu", "AAL5 SDU")
-- The TPDU header (docs/wire.md "The TPDU header").
f.tpdu = ProtoField.none("natm.tpdu", "natm TPDU header")
f.tpdu_ver = ProtoField.uint8("natm.tpdu.ver", "Version", base.DEC, nil, 0xF0)
f.tpdu_type = ProtoField.uint8("natm.tpdu.type", "Type", base.DEC, tpdu_types, 0x0F)
f.tpdu_flags = ProtoField.uint8("natm.tpdu.flags", "Flags", base.HEX)
f.tpdu_first = ProtoField.bool("natm.tpdu.flags.first", "FIRST of a message", 8, nil, 0x01)
f.tpdu_last = ProtoField.bool("natm.tpdu.flags.last", "LAST of a message", 8, nil, 0x02)
f.tpdu_retx = ProtoField.bool("natm.tpdu.flags.retx", "RETX (retransmission)", 8, nil, 0x04)
f.tpdu_pair1 = ProtoField.bool("natm.tpdu.flags.pair1", "PAIR1", 8, nil, 0x08)
f.tpdu_pair2 = ProtoField.bool("natm.tpdu.flags.pair2", "PAIR2", 8, nil, 0x10)
f.tpdu_wfull = ProtoField.bool("natm.tpdu.flags.wfull", "WFULL (receive buffer full)", 8, nil, 0x20)
f.tpdu_pecho = ProtoField.bool("natm.tpdu.flags.pecho", "PECHO (ACK of a PAIR2)", 8, nil, 0x40)
f.tpdu_window = ProtoField.uint16("natm.tpdu.window", "Window", base.DEC)
f.tpdu_cookie = ProtoField.uint32("natm.tpdu.cookie", "Cookie", base.HEX)
f.tpdu_seq = ProtoField.uint32("natm.tpdu.seq", "Sequence / caused-by S", base.DEC)
f.tpdu_ack = ProtoField.uint32("natm.tpdu.ack", "Cumulative ack C", base.DEC)
f.tpdu_msg = ProtoField.uint32("natm.tpdu.msg", "Message number", base.DEC)
f.tpdu_tsval = ProtoField.uint32("natm.tpdu.tsval", "tsval (us)", base.DEC)
f.tpdu_tsecr = ProtoField.uint32("natm.tpdu.tsecr", "tsecr (us)", base.DEC)
f.tpdu_aux = ProtoField.uint32("natm.tpdu.aux", "Message offset / free receive bytes", base.DEC)
f.tpdu_payload = ProtoField.bytes("natm.tpdu.payload", "Payload")
-- Routing frames between switches (docs/wire.md "Routing frames").
f.routing = ProtoField.none("natm.routing", "natm routing frame")
f.routing_ver = ProtoField.uint8("natm.routing.version", "Version", base.DEC)
f.routing_type = ProtoField.uint8("natm.routing.type", "Type", base.DEC, routing_types)
f.routing_node = ProtoField.uint32("natm.routing.node", "Node (hello) / origin (PTSE)", base.DEC)
f.routing_port = ProtoField.uint32("natm.routing.port", "Logical port (hello) / sequence (PTSE)", base.DEC)
f.routing_body = ProtoField.bytes("natm.routing.body", "Rest")
-- The cell train (docs/wire.md "The cell mode's cell train"); UNI cell headers.
f.train_cells = ProtoField.uint16("natm.train.cells", "Cells", base.DEC)
f.cell = ProtoField.bytes("natm.cell", "Cell")
f.cell_gfc = ProtoField.uint32("natm.cell.gfc", "GFC", base.DEC, nil, 0xF0000000)
f.cell_vpi = ProtoField.uint32("natm.cell.vpi", "VPI", base.DEC, nil, 0x0FF00000)
f.cell_vci = ProtoField.uint32("natm.cell.vci", "VCI", base.DEC, nil, 0x000FFFF0)
f.cell_pti = ProtoField.uint32("natm.cell.pti", "PTI", base.DEC, nil, 0x0000000E)
f.cell_clp = ProtoField.uint32("natm.cell.clp", "CLP", base.DEC, nil, 0x00000001)
f.cell_hec = ProtoField.uint8("natm.cell.hec", "HEC", base.HEX)
f.cell_payload = ProtoField.bytes("natm.cell.payload", "Payload")

local VC_HEADER = 4
local TPDU_HEADER = 32
local CELL = 53
local TRAIN_MAGIC = 0xD1

local sscop = Dissector.get("sscop")

-- Whether a VC frame's SDU looks like what its kind says it carries.
local function sdu_fits(kind, sdu_len, tvb)
    if kind == 1 and tvb(1, 1):uint() == 0 and tvb(2, 2):uint() == ROUTING_VCI then
        return sdu_len >= 2 and tvb(VC_HEADER, 1):uint() == 1
    elseif kind == 1 then
        return sdu_len >= 4 and sdu_len % 4 == 0
    elseif kind == 0 then
        return sdu_len >= TPDU_HEADER and bit.rshift(tvb(VC_HEADER, 1):uint(), 4) == 1
    end
    return kind == 2
end

local function dissect_tpdu(tvb, pinfo, tree)
    local t = tree:add(f.tpdu, tvb(0, TPDU_HEADER))
    t:add(f.tpdu_ver, tvb(0, 1))
    t:add(f.tpdu_type, tvb(0, 1))
    local flags = t:add(f.tpdu_flags, tvb(1, 1))
    for _, fl in ipairs({ f.tpdu_first, f.tpdu_last, f.tpdu_retx, f.tpdu_pair1,
                          f.tpdu_pair2, f.tpdu_wfull, f.tpdu_pecho }) do
        flags:add(fl, tvb(1, 1))
    end
    t:add(f.tpdu_window, tvb(2, 2))
    t:add(f.tpdu_cookie, tvb(4, 4))
    t:add(f.tpdu_seq, tvb(8, 4))
    t:add(f.tpdu_ack, tvb(12, 4))
    t:add(f.tpdu_msg, tvb(16, 4))
    t:add(f.tpdu_tsval, tvb(20, 4))
    t:add(f.tpdu_tsecr, tvb(24, 4))
    t:add(f.tpdu_aux, tvb(28, 4))
    if tvb:len() > TPDU_HEADER then
        tree:add(f.tpdu_payload, tvb(TPDU_HEADER))
    end
    local ty = tpdu_types[bit.band(tvb(0, 1):uint(), 0x0F)]
    pinfo.cols.info:append(string.format(" %s seq=%u", ty, tvb(8, 4):uint()))
end

local function dissect_routing(tvb, pinfo, tree)
    local t = tree:add(f.routing, tvb())
    t:add(f.routing_ver, tvb(0, 1))
    t:add(f.routing_type, tvb(1, 1))
    local ty = tvb(1, 1):uint()
    pinfo.cols.info:append(" routing " .. (routing_types[ty] or "?"))
    if (ty == 1 or ty == 2) and tvb:len() >= 10 then
        t:add(f.routing_node, tvb(2, 4))
        t:add(f.routing_port, tvb(6, 4))
        pinfo.cols.info:append(string.format(" node %u", tvb(2, 4):uint()))
        if tvb:len() > 10 then
            t:add(f.routing_body, tvb(10))
        end
    elseif tvb:len() > 2 then
        t:add(f.routing_body, tvb(2))
    end
end

local function dissect_frame(tvb, pinfo, tree)
    local b0 = tvb(0, 1):uint()
    local kind = bit.rshift(bit.band(b0, 0x0C), 2)
    local vpi, vci = tvb(1, 1):uint(), tvb(2, 2):uint()
    pinfo.cols.protocol = "natm"
    pinfo.cols.info = string.format("%s VPI/VCI %u/%u, %u octets", kinds[kind], vpi, vci,
        tvb:len() - VC_HEADER)
    local t = tree:add(natm, tvb(0, VC_HEADER), "natm VC header")
    t:add(f.magic, tvb(0, 1))
    t:add(f.kind, tvb(0, 1))
    t:add(f.ci, tvb(0, 1))
    t:add(f.clp, tvb(0, 1))
    t:add(f.vpi, tvb(1, 1))
    t:add(f.vci, tvb(2, 2))
    local sdu = tvb(VC_HEADER):tvb()
    if kind == 1 and vpi == 0 and vci == ROUTING_VCI then
        dissect_routing(sdu, pinfo, tree)
    elseif kind == 1 then
        sscop:call(sdu, pinfo, tree)
    elseif kind == 0 then
        dissect_tpdu(sdu, pinfo, tree)
    else
        tree:add(f.sdu, sdu())
    end
end

local function dissect_train(tvb, pinfo, tree)
    local n = (tvb:len() - 1) / CELL
    pinfo.cols.protocol = "natm"
    pinfo.cols.info = string.format("cell train, %u cells", n)
    local t = tree:add(natm, tvb(), "natm cell train")
    t:add(f.train_cells, tvb(0, 1), n)
    for i = 0, n - 1 do
        local c = tvb(1 + i * CELL, CELL)
        local h = c(0, 4)
        local ct = t:add(f.cell, c)
        ct:set_text(string.format("Cell %u: VPI/VCI %u/%u, PTI %u", i + 1,
            bit.rshift(bit.band(h:uint(), 0x0FF00000), 20),
            bit.rshift(bit.band(h:uint(), 0x000FFFF0), 4),
            bit.rshift(bit.band(h:uint(), 0x0000000E), 1)))
        ct:add(f.cell_gfc, h)
        ct:add(f.cell_vpi, h)
        ct:add(f.cell_vci, h)
        ct:add(f.cell_pti, h)
        ct:add(f.cell_clp, h)
        ct:add(f.cell_hec, c(4, 1))
        ct:add(f.cell_payload, c(5, CELL - 5))
    end
end

local function heuristic(tvb, pinfo, tree)
    local len = tvb:len()
    if len < 1 then
        return false
    end
    local b0 = tvb(0, 1):uint()
    if bit.rshift(b0, 4) == 0xC then
        if len < VC_HEADER then
            return false
        end
        local kind = bit.rshift(bit.band(b0, 0x0C), 2)
        if kind == 3 or tvb(2, 2):uint() == 0 or not sdu_fits(kind, len - VC_HEADER, tvb) then
            return false
        end
        dissect_frame(tvb, pinfo, tree)
        return true
    elseif b0 == TRAIN_MAGIC and len > CELL and (len - 1) % CELL == 0 then
        dissect_train(tvb, pinfo, tree)
        return true
    end
    return false
end

-- Also for "Decode As... natm" on a UDP port.
function natm.dissector(tvb, pinfo, tree)
    if not heuristic(tvb, pinfo, tree) then
        return 0
    end
    return tvb:len()
end

natm:register_heuristic("udp", heuristic)
DissectorTable.get("udp.port"):add_for_decode_as(natm)

-- Linux's atmtcp link over TCP (docs/wire.md "atmtcp link"): what `natm switch`'s
-- atmtcp ports and Linux's atmtcp driver exchange. Each message is an 8-octet header
-- (VPI, VCI, length; network order) and then `length` octets: an AAL5 SDU, or on
-- VPI/VCI 0/0 a line of ASCII control text ("O ..." opened, "C ..." closed). SDUs on
-- VPI 0/VCI 5 are signalling (SSCOP, then Q.2931), the rest data. Wireshark's own
-- "atmtcp" dissector shows every SDU as data; this one, "natm_atmtcp", hands the
-- signalling on. Port 2812 (Linux's default) is claimed; use "Decode As...
-- natm_atmtcp" (tshark: -d tcp.port==P,natm_atmtcp) for another.
local atmtcp = Proto("natm_atmtcp", "Linux atmtcp link (signalling decoded)")
local af = atmtcp.fields
af.vpi = ProtoField.uint16("natm_atmtcp.vpi", "VPI", base.DEC)
af.vci = ProtoField.uint16("natm_atmtcp.vci", "VCI", base.DEC)
af.len = ProtoField.uint32("natm_atmtcp.length", "Length", base.DEC)
af.control = ProtoField.string("natm_atmtcp.control", "Control")
af.sdu = ProtoField.bytes("natm_atmtcp.sdu", "AAL5 SDU")

local ATMTCP_HEADER = 8

local function atmtcp_pdu_len(tvb, pinfo, offset)
    return ATMTCP_HEADER + tvb(offset + 4, 4):uint()
end

local function atmtcp_pdu(tvb, pinfo, tree)
    local vpi, vci, len = tvb(0, 2):uint(), tvb(2, 2):uint(), tvb(4, 4):uint()
    pinfo.cols.protocol = "atmtcp"
    local t = tree:add(atmtcp, tvb(0, ATMTCP_HEADER))
    t:add(af.vpi, tvb(0, 2))
    t:add(af.vci, tvb(2, 2))
    t:add(af.len, tvb(4, 4))
    if len == 0 then
        pinfo.cols.info = string.format("VPI/VCI %u/%u, empty", vpi, vci)
        return
    end
    local body = tvb(ATMTCP_HEADER, len)
    if vpi == 0 and vci == 0 then
        pinfo.cols.info = "control: " .. body:string()
        t:add(af.control, body)
    elseif vpi == 0 and vci == 5 then
        pinfo.cols.info = "signalling"
        sscop:call(body:tvb(), pinfo, tree)
    else
        pinfo.cols.info = string.format("VPI/VCI %u/%u, %u octets", vpi, vci, len)
        t:add(af.sdu, body)
    end
end

function atmtcp.dissector(tvb, pinfo, tree)
    dissect_tcp_pdus(tvb, tree, ATMTCP_HEADER, atmtcp_pdu_len, atmtcp_pdu)
    return tvb:len()
end

DissectorTable.get("tcp.port"):add(2812, atmtcp)
