package kafkalake.jobs;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.TypeCheckResult;
import org.apache.spark.sql.catalyst.expressions.ExpectsInputTypes;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.Block;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.sparkproject.spark_core.protobuf.ByteString;
import org.sparkproject.spark_core.protobuf.CodedInputStream;
import org.sparkproject.spark_core.protobuf.DescriptorProtos.FileDescriptorProto;
import org.sparkproject.spark_core.protobuf.DescriptorProtos.FileDescriptorSet;
import org.sparkproject.spark_core.protobuf.Descriptors.Descriptor;
import org.sparkproject.spark_core.protobuf.Descriptors.DescriptorValidationException;
import org.sparkproject.spark_core.protobuf.Descriptors.EnumDescriptor;
import org.sparkproject.spark_core.protobuf.Descriptors.EnumValueDescriptor;
import org.sparkproject.spark_core.protobuf.Descriptors.FieldDescriptor;
import org.sparkproject.spark_core.protobuf.Descriptors.FileDescriptor;
import org.sparkproject.spark_core.protobuf.DynamicMessage;
import org.sparkproject.spark_core.protobuf.ExtensionRegistryLite;
import org.sparkproject.spark_core.protobuf.InvalidProtocolBufferException;
import org.sparkproject.spark_core.protobuf.UnsafeByteOperations;
import org.sparkproject.spark_core.protobuf.WireFormat;
import scala.Function1;
import scala.collection.IndexedSeq;
import scala.collection.Iterator;
import scala.collection.JavaConverters;
import scala.collection.Seq;

/**
 * One Protobuf message type's payloads decoded into the Spark struct of its table's columns
 * ({@code spark_jobs.protobuf_decoder} says why this is ours and not spark-protobuf's {@code from_protobuf}).
 *
 * <p>The struct is given: {@code kafkalake.protobuf_schema} renders the message as an Avro record and spark-avro maps
 * that to Spark's types, so the column types are decided in one place. This class fills a row field by field, by
 * name: a field with presence (a message, a wrapper, proto3 {@code optional}, a {@code oneof} arm) that is unset is
 * null, a field without presence is its value (proto3's zero value included); {@code Timestamp} is a timestamp, a
 * wrapper its value, an enum its name (an unknown number its digits), a map's keys their text, an unsigned 32-bit
 * number a long. A payload that does not parse is null (the caller quarantines it). The protobuf runtime is the one
 * Spark's core jar relocates ({@code org.sparkproject.spark_core.protobuf}), so the jobs ship no second copy that
 * could clash with another on the classpath.
 *
 * <p>It is a Catalyst expression of one child (the payload's bytes), as spark-avro's {@code from_avro} is
 * ({@code AvroDataToCatalyst}), and it writes Spark's internal values itself ({@code InternalRow},
 * {@code UTF8String}, {@code ArrayData}, {@code MapData}, a timestamp's microseconds) where a function returning
 * external rows has Spark convert each row again. It reads the wire format itself ({@code CodedInputStream}, by the
 * message's descriptors: {@link Reader}) instead of building a {@code DynamicMessage} per record and copying it out:
 * text goes from the payload's bytes to a {@code UTF8String} once, and no map of boxed fields is built. It reads what
 * protobuf's parser reads and refuses what it refuses ({@link Reader} says how); where {@code DynamicMessage} threw
 * an unchecked exception instead (a proto2 message given twice, both times without a required field), this is null
 * too.
 *
 * <p>It extends {@code Expression}, not {@code UnaryExpression}: javac cannot compile a subclass of the latter (its
 * final {@code withNewChildrenInternal} is raw, returning {@code TreeNode}, so javac finds {@code TreeNode}'s generic
 * one unimplemented), so the one child's plumbing is here. Its generated code evaluates the child inline and calls
 * {@link #decode}, as {@code from_avro}'s calls its own class. It travels to the executors as any expression of a
 * plan does (Java serialization): the descriptor set, the message's name and the struct; the reader is rebuilt from
 * them on first use.
 *
 * <p>Past 400 lines on purpose: the wire reader (one method per wire type and field kind, as the protobuf runtime's
 * parser has them) must stay beside the descriptor lookup and the Catalyst plumbing it serves; the row-by-row
 * comparison with the runtime's own parser (see the commit that made it) covers it as one unit.
 */
public final class ProtobufDecoder extends Expression implements ExpectsInputTypes, Serializable {
    private static final long serialVersionUID = 2L;
    private static final String TIMESTAMP = "google.protobuf.Timestamp";
    private static final String WRAPPERS = "google.protobuf.";

    private final Expression payload;
    private final byte[] descriptorSet;
    private final String messageName;
    private final DataType struct;
    private transient Seq<Expression> children;
    private transient Reader reader;

    /**
     * The decoder of {@code messageName} from the bytes of {@code payload} into {@code struct}, unchecked: Spark's
     * copies of the node call this ({@link #column} checks).
     */
    public ProtobufDecoder(Expression payload, byte[] descriptorSet, String messageName, DataType struct) {
        this.payload = payload;
        this.descriptorSet = descriptorSet;
        this.messageName = messageName;
        this.struct = struct;
    }

    /**
     * The column of {@code payload} decoded as {@code messageName} (a full name, nested ones included) from a
     * serialized FileDescriptorSet holding its file and every import, into the struct {@code schemaJson} (Spark's
     * JSON of a StructType). Checked here, on the driver: a message or field the descriptors lack fails with its name.
     */
    public static Column column(Column payload, byte[] descriptorSet, String messageName, String schemaJson) {
        ProtobufDecoder decoder =
                new ProtobufDecoder(payload.expr(), descriptorSet.clone(), messageName, DataType.fromJson(schemaJson));
        decoder.reader();
        return new Column(decoder);
    }

    /** The payload's message as an internal row of the struct; null for bytes that do not parse. */
    public InternalRow decode(byte[] bytes) {
        try {
            return (InternalRow) reader().top(CodedInputStream.newInstance(bytes));
        } catch (InvalidProtocolBufferException e) {
            return null;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public Object eval(InternalRow input) {
        Object bytes = payload.eval(input);
        return bytes == null ? null : decode((byte[]) bytes);
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        ExprCode bytes = payload.genCode(ctx);
        String decoder = ctx.addReferenceObj("protobufDecoder", this, ProtobufDecoder.class.getName());
        String row = CodeGenerator.javaType(struct);
        Block code = block("\n", bytes.code(),
                "\nboolean ", ev.isNull(), " = ", bytes.isNull(), ";\n",
                row + " ", ev.value(), " = null;\n",
                "if (!", ev.isNull(), ") {\n",
                "  ", ev.value(), " = " + decoder + ".decode(", bytes.value(), ");\n",
                "  ", ev.isNull(), " = ", ev.value(), " == null;\n",
                "}\n");
        return new ExprCode(code, ev.isNull(), ev.value());
    }

    /** A code block of text and code values, as Spark's {@code code"..."} interpolator makes it. */
    private static Block block(Object... pieces) {
        List<String> parts = new ArrayList<>();
        List<JavaCode> inputs = new ArrayList<>();
        StringBuilder part = new StringBuilder();
        for (Object piece : pieces) {
            if (piece instanceof JavaCode) {
                parts.add(part.toString());
                part.setLength(0);
                inputs.add((JavaCode) piece);
            } else {
                part.append((String) piece);
            }
        }
        parts.add(part.toString());
        return new CodeBlock(JavaConverters.asScalaBuffer(parts).toList(), JavaConverters.asScalaBuffer(inputs).toList());
    }

    @Override
    public DataType dataType() {
        return struct;
    }

    @Override
    public boolean nullable() {
        return true;
    }

    @Override
    public Seq<AbstractDataType> inputTypes() {
        return JavaConverters.asScalaBuffer(List.<AbstractDataType>of(DataTypes.BinaryType)).toList();
    }

    @Override
    public TypeCheckResult checkInputDataTypes() {
        return ExpectsInputTypes.super.checkInputDataTypes();
    }

    @Override
    public Seq<Expression> children() {
        if (children == null) {
            children = JavaConverters.asScalaBuffer(List.of(payload)).toList();
        }
        return children;
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
        return new ProtobufDecoder(newChildren.apply(0), descriptorSet, messageName, struct);
    }

    @Override
    public Expression mapChildren(Function1<Expression, Expression> f) {
        Expression mapped = f.apply(payload);
        return mapped.fastEquals(payload) ? this : withNewChildren(JavaConverters.asScalaBuffer(List.of(mapped)).toList());
    }

    @Override
    public String prettyName() {
        return "protobuf_" + messageName.replace('.', '_');
    }

    @Override
    public Iterator<Object> flatArguments() {
        return JavaConverters.asScalaIterator(List.<Object>of(payload).iterator());
    }

    @Override
    public int productArity() {
        return 4;
    }

    @Override
    public Object productElement(int n) {
        switch (n) {
            case 0:
                return payload;
            case 1:
                return descriptorSet;
            case 2:
                return messageName;
            case 3:
                return struct;
            default:
                throw new IndexOutOfBoundsException(Integer.toString(n));
        }
    }

    @Override
    public boolean canEqual(Object other) {
        return other instanceof ProtobufDecoder;
    }

    @Override
    public boolean equals(Object other) {
        if (this == other) {
            return true;
        }
        if (!(other instanceof ProtobufDecoder)) {
            return false;
        }
        ProtobufDecoder that = (ProtobufDecoder) other;
        return payload.equals(that.payload) && messageName.equals(that.messageName) && struct.equals(that.struct)
                && Arrays.equals(descriptorSet, that.descriptorSet);
    }

    @Override
    public int hashCode() {
        return Objects.hash(payload, messageName, struct, Arrays.hashCode(descriptorSet));
    }

    private Reader reader() {
        if (reader == null) {
            reader = new Reader(message(descriptorSet, messageName), struct);
        }
        return reader;
    }

    static Descriptor message(byte[] descriptorSet, String messageName) {
        Map<String, FileDescriptor> built = new HashMap<>();
        try {
            FileDescriptorSet set = FileDescriptorSet.parseFrom(descriptorSet);
            Map<String, FileDescriptorProto> protos = new HashMap<>();
            for (FileDescriptorProto file : set.getFileList()) {
                protos.put(file.getName(), file);
            }
            for (FileDescriptorProto file : set.getFileList()) {
                Descriptor found = find(file(file.getName(), protos, built), messageName);
                if (found != null) {
                    return found;
                }
            }
        } catch (InvalidProtocolBufferException | DescriptorValidationException e) {
            throw new IllegalArgumentException("the descriptor set of " + messageName + " is not valid: " + e, e);
        }
        throw new IllegalArgumentException("no message " + messageName + " in the descriptor set");
    }

    private static FileDescriptor file(String name, Map<String, FileDescriptorProto> protos, Map<String, FileDescriptor> built)
            throws DescriptorValidationException {
        FileDescriptor done = built.get(name);
        if (done != null) {
            return done;
        }
        FileDescriptorProto proto = protos.get(name);
        if (proto == null) {
            throw new IllegalArgumentException("the descriptor set lacks " + name + ", which another file imports");
        }
        List<FileDescriptor> imports = new ArrayList<>();
        for (String dependency : proto.getDependencyList()) {
            imports.add(file(dependency, protos, built));
        }
        FileDescriptor made = FileDescriptor.buildFrom(proto, imports.toArray(new FileDescriptor[0]));
        built.put(name, made);
        return made;
    }

    private static Descriptor find(FileDescriptor file, String fullName) {
        for (Descriptor top : file.getMessageTypes()) {
            Descriptor found = find(top, fullName);
            if (found != null) {
                return found;
            }
        }
        return null;
    }

    private static Descriptor find(Descriptor message, String fullName) {
        if (message.getFullName().equals(fullName)) {
            return message;
        }
        for (Descriptor nested : message.getNestedTypes()) {
            Descriptor found = find(nested, fullName);
            if (found != null) {
                return found;
            }
        }
        return null;
    }

    /** How one value of a field is read off the wire: its internal value, or {@link #SKIP}. */
    private interface Value {
        Object read(CodedInputStream in) throws IOException;
    }

    /** What a closed enum's unknown number reads as: nothing (protobuf keeps it among the unknown fields). */
    private static final Object SKIP = new Object();

    /**
     * A message type read off the wire into a state (one slot per field, the output's first, in the output's order)
     * and finished into its internal value: a row of its struct, a timestamp's microseconds, a wrapper's value, or a
     * map entry's key and value. It merges as protobuf's parser does ({@code MessageReflection.mergeFieldFrom} of the
     * relocated runtime): a scalar's last value, a message's occurrences merged, repeated fields appended packed or
     * not, a oneof's arm clearing the others, a field of the wrong wire type or an unknown field skipped, an enum's
     * unknown number its digits or, in a closed enum, skipped; a map entry without its key or value has the type's
     * default, and a key given twice its last value. It validates what it does not keep (a field not in the struct:
     * scalars read, messages parsed as {@code DynamicMessage}) and refuses what protobuf refuses: malformed bytes,
     * invalid UTF-8 where the field requires it ({@code needsUtf8Check}; elsewhere replaced as {@code String} does), a
     * required field missing at any depth (a map entry's missing value included, as {@code MapEntry} checks it).
     */
    private static final class Reader {
        static final int ROW = 0;
        static final int INSTANT = 1;
        static final int WRAPPED = 2;
        static final int ENTRY = 3;

        final int mode;
        final int outputs;
        final FieldDescriptor[] fields;
        final int[] wire;
        final boolean[] packable;
        final boolean[] repeated;
        final boolean[] map;
        final boolean[] group;
        final boolean[] presence;
        final Value[] values;
        final Reader[] nested;
        final Object[] absent;
        final int[][] oneof;
        final int[] required;
        final int[] bySmallNumber;
        final Map<Integer, Integer> byNumber = new HashMap<>();

        Reader(Descriptor descriptor, DataType type) {
            List<FieldDescriptor> order = new ArrayList<>();
            List<DataType> types = new ArrayList<>();
            String name = descriptor.getFullName();
            if (descriptor.getOptions().getMapEntry()) {
                mode = ENTRY;
                MapType entry = (MapType) type;
                order.add(descriptor.findFieldByNumber(1));
                types.add(entry.keyType());
                order.add(descriptor.findFieldByNumber(2));
                types.add(entry.valueType());
            } else if (name.equals(TIMESTAMP)) {
                mode = INSTANT;
                order.add(descriptor.findFieldByName("seconds"));
                order.add(descriptor.findFieldByName("nanos"));
                types.add(DataTypes.LongType);
                types.add(DataTypes.IntegerType);
            } else if (name.startsWith(WRAPPERS) && name.endsWith("Value") && descriptor.getFields().size() == 1
                    && descriptor.getFields().get(0).getName().equals("value") && !(type instanceof StructType)) {
                mode = WRAPPED;
                order.add(descriptor.getFields().get(0));
                types.add(type);
            } else {
                mode = ROW;
                for (StructField column : ((StructType) type).fields()) {
                    FieldDescriptor field = descriptor.findFieldByName(column.name());
                    if (field == null) {
                        throw new IllegalArgumentException(
                                "message " + descriptor.getFullName() + " has no field " + column.name());
                    }
                    order.add(field);
                    types.add(column.dataType());
                }
            }
            outputs = order.size();
            for (FieldDescriptor field : descriptor.getFields()) {
                if (!order.contains(field)) {
                    order.add(field);
                    types.add(null);
                }
            }
            int slots = order.size();
            fields = order.toArray(new FieldDescriptor[0]);
            wire = new int[slots];
            packable = new boolean[slots];
            repeated = new boolean[slots];
            map = new boolean[slots];
            group = new boolean[slots];
            presence = new boolean[slots];
            values = new Value[slots];
            nested = new Reader[slots];
            absent = new Object[slots];
            oneof = new int[slots][];
            List<Integer> requiredSlots = new ArrayList<>();
            int largest = 0;
            for (int i = 0; i < slots; i++) {
                FieldDescriptor field = fields[i];
                DataType column = types.get(i);
                wire[i] = field.getLiteType().getWireType();
                packable[i] = field.isPackable();
                repeated[i] = field.isRepeated();
                map[i] = field.isMapField();
                group[i] = field.getType() == FieldDescriptor.Type.GROUP;
                presence[i] = mode == ROW && !field.isRepeated() && field.hasPresence();
                if (field.isRequired()) {
                    requiredSlots.add(i);
                }
                byNumber.put(field.getNumber(), i);
                largest = Math.max(largest, field.getNumber());
                if (field.getRealContainingOneof() != null) {
                    List<Integer> others = new ArrayList<>();
                    for (FieldDescriptor arm : field.getRealContainingOneof().getFields()) {
                        if (arm != field) {
                            others.add(order.indexOf(arm));
                        }
                    }
                    oneof[i] = others.stream().mapToInt(Integer::intValue).toArray();
                }
                DataType element = column != null && repeated[i] && !map[i] ? ((ArrayType) column).elementType() : column;
                if (field.getJavaType() == FieldDescriptor.JavaType.MESSAGE) {
                    if (column != null) {
                        nested[i] = new Reader(field.getMessageType(), element);
                    }
                } else {
                    values[i] = value(field, element);
                    absent[i] = column == null || repeated[i] ? null : internal(element, field.getDefaultValue());
                }
            }
            required = requiredSlots.stream().mapToInt(Integer::intValue).toArray();
            bySmallNumber = new int[largest < 1024 ? largest + 1 : 0];
            for (Map.Entry<Integer, Integer> slot : byNumber.entrySet()) {
                if (slot.getKey() < bySmallNumber.length) {
                    bySmallNumber[slot.getKey()] = slot.getValue() + 1;
                }
            }
        }

        /** A message read off the top of {@code in}: its internal value. */
        Object top(CodedInputStream in) throws IOException {
            Object[] state = new Object[fields.length];
            merge(in, state);
            in.checkLastTagWas(0);
            return finish(state, true);
        }

        /** One occurrence of a message field of this type (length-delimited, or a group) merged into {@code state}. */
        void occurrence(CodedInputStream in, Object[] state, boolean isGroup, int number) throws IOException {
            if (isGroup) {
                merge(in, state);
                in.checkLastTagWas((number << 3) | WireFormat.WIRETYPE_END_GROUP);
                return;
            }
            int limit = in.pushLimit(in.readRawVarint32());
            merge(in, state);
            in.checkLastTagWas(0);
            in.popLimit(limit);
        }

        /** Fields read until the end of the input (or of its limit), or an end-group tag. */
        void merge(CodedInputStream in, Object[] state) throws IOException {
            while (true) {
                int tag = in.readTag();
                if (tag == 0 || !field(in, state, tag)) {
                    return;
                }
            }
        }

        private boolean field(CodedInputStream in, Object[] state, int tag) throws IOException {
            int number = tag >>> 3;
            int slot;
            if (number < bySmallNumber.length) {
                slot = bySmallNumber[number] - 1;
            } else {
                Integer found = byNumber.get(number);
                slot = found == null ? -1 : found;
            }
            if (slot < 0) {
                return in.skipField(tag);
            }
            int wireType = tag & 7;
            if (wireType == wire[slot]) {
                one(in, state, slot);
            } else if (packable[slot] && wireType == WireFormat.WIRETYPE_LENGTH_DELIMITED) {
                int limit = in.pushLimit(in.readRawVarint32());
                while (in.getBytesUntilLimit() > 0) {
                    Object value = values[slot].read(in);
                    if (value != SKIP) {
                        append(state, slot, value);
                    }
                }
                in.popLimit(limit);
            } else {
                return in.skipField(tag);
            }
            return true;
        }

        private void one(CodedInputStream in, Object[] state, int slot) throws IOException {
            FieldDescriptor field = fields[slot];
            Reader message = nested[slot];
            if (message != null) {
                Object[] inner = repeated[slot] ? null : (Object[]) state[slot];
                if (inner == null) {
                    inner = new Object[message.fields.length];
                    if (repeated[slot]) {
                        append(state, slot, inner);
                    } else {
                        set(state, slot, inner);
                    }
                }
                message.occurrence(in, inner, group[slot], field.getNumber());
            } else if (values[slot] == null) {  // a message not in the struct: parsed, to refuse what protobuf refuses
                DynamicMessage.Builder inner = repeated[slot] ? null : (DynamicMessage.Builder) state[slot];
                if (inner == null) {
                    inner = DynamicMessage.newBuilder(field.getMessageType());
                    if (repeated[slot]) {
                        append(state, slot, inner);
                    } else {
                        set(state, slot, inner);
                    }
                }
                if (group[slot]) {
                    in.readGroup(field.getNumber(), inner, ExtensionRegistryLite.getEmptyRegistry());
                } else {
                    in.readMessage(inner, ExtensionRegistryLite.getEmptyRegistry());
                }
            } else {
                Object value = values[slot].read(in);
                if (value == SKIP) {
                    return;
                }
                if (repeated[slot]) {
                    append(state, slot, value);
                } else {
                    set(state, slot, value);
                }
            }
        }

        private void set(Object[] state, int slot, Object value) {
            state[slot] = value;
            int[] others = oneof[slot];
            if (others != null) {
                for (int other : others) {
                    state[other] = null;
                }
            }
        }

        @SuppressWarnings("unchecked")
        private static void append(Object[] state, int slot, Object value) {
            List<Object> list = (List<Object>) state[slot];
            if (list == null) {
                list = new ArrayList<>();
                state[slot] = list;
            }
            list.add(value);
        }

        /** The internal value of a read state; with {@code check}, a required field missing at any depth refuses it. */
        Object finish(Object[] state, boolean check) throws InvalidProtocolBufferException {
            if (check) {
                initialized(state);
            }
            switch (mode) {
                case INSTANT:
                    long seconds = state[0] == null ? 0L : (Long) state[0];
                    int nanos = state[1] == null ? 0 : (Integer) state[1];
                    return DateTimeUtils.instantToMicros(Instant.ofEpochSecond(seconds, nanos));
                case WRAPPED:
                    return output(state, 0, check);
                default:
                    Object[] out = state.length == outputs ? state : new Object[outputs];
                    for (int i = 0; i < outputs; i++) {
                        out[i] = output(state, i, check);
                    }
                    return mode == ENTRY ? out : new GenericInternalRow(out);
            }
        }

        private void initialized(Object[] state) throws InvalidProtocolBufferException {
            for (int slot : required) {
                if (state[slot] == null) {
                    throw new InvalidProtocolBufferException("required field " + fields[slot].getFullName() + " missing");
                }
            }
            for (int i = outputs; i < fields.length; i++) {
                if (nested[i] == null && values[i] == null && state[i] != null) {
                    List<?> messages = repeated[i] ? (List<?>) state[i] : List.of(state[i]);
                    for (Object message : messages) {
                        if (!((DynamicMessage.Builder) message).isInitialized()) {
                            throw new InvalidProtocolBufferException("message " + fields[i].getFullName() + " lacks a required field");
                        }
                    }
                }
            }
        }

        private Object output(Object[] state, int slot, boolean check) throws InvalidProtocolBufferException {
            Object value = state[slot];
            Reader message = nested[slot];
            if (map[slot]) {
                Map<Object, Object> entries = new LinkedHashMap<>();  // a key given twice: its last value, as protobuf's
                if (value != null) {
                    for (Object entry : (List<?>) value) {
                        Object[] pair = (Object[]) message.finish((Object[]) entry, check);
                        entries.put(pair[0], pair[1]);
                    }
                }
                return new ArrayBasedMapData(
                        new GenericArrayData(entries.keySet().toArray()), new GenericArrayData(entries.values().toArray()));
            }
            if (repeated[slot]) {
                if (value == null) {
                    return new GenericArrayData(new Object[0]);
                }
                Object[] items = ((List<?>) value).toArray();
                if (message != null) {
                    for (int i = 0; i < items.length; i++) {
                        items[i] = message.finish((Object[]) items[i], check);
                    }
                }
                return new GenericArrayData(items);
            }
            if (value == null) {
                if (presence[slot]) {
                    return null;
                }
                return message == null ? absent[slot] : message.finish(new Object[message.fields.length], check);
            }
            return message == null ? value : message.finish((Object[]) value, check);
        }
    }

    /**
     * How a scalar field's value is read as its column's internal value ({@code type}; null for a field not in the
     * struct): text as {@code UTF8String}, bytes as {@code byte[]}, an enum as its name (an unknown number: its digits,
     * or nothing if the enum is closed), a number as the column holds it ({@link #internal}).
     */
    private static Value value(FieldDescriptor field, DataType type) {
        switch (field.getType()) {
            case STRING:
                boolean strict = field.needsUtf8Check();
                return in -> text(in.readByteArray(), strict);
            case BYTES:
                return CodedInputStream::readByteArray;
            case ENUM:
                EnumDescriptor enumType = field.getEnumType();
                boolean closed = field.legacyEnumFieldTreatedAsClosed();
                Map<Integer, UTF8String> names = new HashMap<>();
                for (EnumValueDescriptor named : enumType.getValues()) {
                    names.put(named.getNumber(), UTF8String.fromString(enumType.findValueByNumber(named.getNumber()).getName()));
                }
                return in -> {
                    int number = in.readEnum();
                    UTF8String found = names.get(number);
                    if (found != null) {
                        return found;
                    }
                    return closed ? SKIP : UTF8String.fromString(Integer.toString(number));
                };
            default:
                Value raw = number(field.getType());
                if (DataTypes.StringType.equals(type)) {
                    return in -> internal(type, raw.read(in));
                }
                if (DataTypes.LongType.equals(type) && field.getJavaType() == FieldDescriptor.JavaType.INT) {
                    return in -> Integer.toUnsignedLong((Integer) raw.read(in));
                }
                return raw;
        }
    }

    private static Value number(FieldDescriptor.Type type) {
        switch (type) {
            case DOUBLE:
                return CodedInputStream::readDouble;
            case FLOAT:
                return CodedInputStream::readFloat;
            case INT64:
                return CodedInputStream::readInt64;
            case UINT64:
                return CodedInputStream::readUInt64;
            case INT32:
                return CodedInputStream::readInt32;
            case FIXED64:
                return CodedInputStream::readFixed64;
            case FIXED32:
                return CodedInputStream::readFixed32;
            case BOOL:
                return CodedInputStream::readBool;
            case UINT32:
                return CodedInputStream::readUInt32;
            case SFIXED32:
                return CodedInputStream::readSFixed32;
            case SFIXED64:
                return CodedInputStream::readSFixed64;
            case SINT32:
                return CodedInputStream::readSInt32;
            case SINT64:
                return CodedInputStream::readSInt64;
            default:
                throw new IllegalArgumentException("not a number: " + type);
        }
    }

    /**
     * A field's value as protobuf's Java runtime holds it ({@code raw}: a boxed number, a {@code String}, a
     * {@code ByteString}, an {@code EnumValueDescriptor}) as its column's internal value: an unsigned 32-bit number in
     * a long, anything in a text column (a map's key) as its text.
     */
    private static Object internal(DataType type, Object raw) {
        if (raw instanceof EnumValueDescriptor) {
            return UTF8String.fromString(((EnumValueDescriptor) raw).getName());
        }
        if (raw instanceof ByteString) {
            return ((ByteString) raw).toByteArray();
        }
        if (DataTypes.StringType.equals(type) || raw instanceof String) {
            return UTF8String.fromString(String.valueOf(raw));
        }
        if (DataTypes.LongType.equals(type) && raw instanceof Integer) {
            return Integer.toUnsignedLong((Integer) raw);
        }
        return raw;
    }

    /** UTF-8 bytes as text: invalid UTF-8 refused where protobuf checks it, replaced where it does not. */
    private static UTF8String text(byte[] bytes, boolean strict) throws InvalidProtocolBufferException {
        if (UnsafeByteOperations.unsafeWrap(bytes).isValidUtf8()) {
            return UTF8String.fromBytes(bytes);
        }
        if (strict) {
            throw new InvalidProtocolBufferException("Protocol message had invalid UTF-8.");
        }
        return UTF8String.fromString(new String(bytes, StandardCharsets.UTF_8));
    }
}
