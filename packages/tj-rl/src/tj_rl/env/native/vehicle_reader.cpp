// tj-rl's compiled vehicle reader (EnvConfig(reader="native"), Python side: native_reader.py).
//
// Reads the vehicles around each controlled light straight from libsumo's C++ API, in the
// `_libsumo.so` image the Python `libsumo` module has loaded (this library links against that very
// file, so both drive one simulation), and writes them as tj-rl's ROW_COLUMNS rows: the same
// numbers, in the same order, as a context subscription parsed by features.subscription_rows, with
// no subscription evaluated by SUMO, no SWIG conversion to Python dicts and no Python parse.
//
// A plain C ABI (no Python headers): loaded with ctypes. No C++ exception crosses it: a failed
// read returns -1 and tj_reader_error() says why.
#define LIBSUMO_NAMESPACE libsumo
#include <libsumo/Lane.h>
#include <libsumo/Vehicle.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr int kColumns = 16;                         // features.ROW_COLUMNS
constexpr double kDeg = 3.141592653589793 / 180.0;   // Python's math.pi / 180.0

struct LaneInfo {
    std::string id;
    double move;    // movement index of the lane in the light's lane table
    double offset;  // distance from the lane's start to the stop line (topology._lane_table)
};

struct Light {
    std::vector<LaneInfo> lanes;
    double cx, cy;         // the centre the rows are relative to (topology.LightTopology.centre)
    double ox, oy, range;  // point and radius of the context subscription it replaces
};

struct Vehicle {
    std::string id;
    double row[kColumns];
};

struct Reader {
    std::vector<Light> lights;
    std::vector<std::vector<Vehicle>> found;  // the last read, per light
    double pad[kColumns] = {};                 // features.PAD_ROW
    std::vector<double> rows;                  // the last read as [lights, width, kColumns]
    std::string ids;                           // its vehicle ids, NUL-terminated, in row order
    std::string error;
};

void read_light(const Light& light, std::vector<Vehicle>& out) {
    out.clear();
    for (const LaneInfo& lane : light.lanes) {
        for (const std::string& v : libsumo::Lane::getLastStepVehicleIDs(lane.id)) {
            const libsumo::TraCIPosition p = libsumo::Vehicle::getPosition(v);
            // SUMO's test for a junction context subscription: distance to its position
            const double ox = light.ox - p.x, oy = light.oy - p.y;
            if (std::sqrt(ox * ox + oy * oy) > light.range) continue;
            const double rx = p.x - light.cx, ry = p.y - light.cy;
            const double angle = libsumo::Vehicle::getAngle(v);
            const double lane_pos = libsumo::Vehicle::getLanePosition(v);
            const double rad = angle * kDeg;
            Vehicle veh{v,
                        {rx, ry, libsumo::Vehicle::getSpeed(v), libsumo::Vehicle::getAcceleration(v),
                         std::cos(rad), std::sin(rad), lane.offset - lane_pos,
                         libsumo::Vehicle::getWaitingTime(v), libsumo::Vehicle::getLength(v), p.x,
                         p.y, angle, lane_pos, lane.move, lane.offset, rx * rx + ry * ry}};
            out.push_back(std::move(veh));
        }
    }
    // a context subscription's results come from SUMO's map: ordered by vehicle id
    std::sort(out.begin(), out.end(),
              [](const Vehicle& a, const Vehicle& b) { return a.id < b.id; });
}

}  // namespace

extern "C" {

void* tj_reader_new() { return new Reader(); }

void tj_reader_free(void* reader) { delete static_cast<Reader*>(reader); }

const char* tj_reader_error(void* reader) { return static_cast<Reader*>(reader)->error.c_str(); }

// lanes: n NUL-terminated lane ids back to back; moves, offsets: n values each.
void tj_reader_add_light(void* reader, const char* lanes, int n, const double* moves,
                         const double* offsets, double cx, double cy, double ox, double oy,
                         double range) {
    Reader& r = *static_cast<Reader*>(reader);
    Light light{{}, cx, cy, ox, oy, range};
    for (int i = 0; i < n; ++i) {
        const std::string id(lanes);
        lanes += id.size() + 1;
        light.lanes.push_back({id, moves[i], offsets[i]});
    }
    r.lights.push_back(std::move(light));
    r.found.emplace_back();
}

void tj_reader_set_pad(void* reader, const double* pad_row) {
    std::memcpy(static_cast<Reader*>(reader)->pad, pad_row, sizeof(Reader::pad));
}

// Read every light in one call: counts[light] vehicles each; *rows points at [lights, width,
// kColumns] float64 (width: the largest count; a light's rows after its vehicles are the pad
// row); *ids at their ids, NUL-terminated in row order, *id_bytes long. Both stay valid until the
// next read. Returns width, or -1 (see tj_reader_error).
int tj_reader_read(void* reader, int* counts, const double** rows, const char** ids,
                   long* id_bytes) {
    Reader& r = *static_cast<Reader*>(reader);
    try {
        size_t width = 0;
        r.ids.clear();
        for (size_t l = 0; l < r.lights.size(); ++l) {
            read_light(r.lights[l], r.found[l]);
            counts[l] = static_cast<int>(r.found[l].size());
            width = std::max(width, r.found[l].size());
            for (const Vehicle& v : r.found[l]) r.ids.append(v.id.c_str(), v.id.size() + 1);
        }
        r.rows.resize(r.lights.size() * width * kColumns);
        for (size_t l = 0; l < r.lights.size(); ++l) {
            double* block = r.rows.data() + l * width * kColumns;
            const std::vector<Vehicle>& found = r.found[l];
            for (size_t i = 0; i < found.size(); ++i)
                std::memcpy(block + i * kColumns, found[i].row, sizeof(found[i].row));
            for (size_t i = found.size(); i < width; ++i)
                std::memcpy(block + i * kColumns, r.pad, sizeof(r.pad));
        }
        *rows = r.rows.data();
        *ids = r.ids.data();
        *id_bytes = static_cast<long>(r.ids.size());
        return static_cast<int>(width);
    } catch (const std::exception& e) {
        r.error = e.what();
    } catch (...) {
        r.error = "unknown C++ exception";
    }
    return -1;
}

}  // extern "C"
