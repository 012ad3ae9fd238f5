package kafkalake.jobs;

import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.sparkproject.spark_core.protobuf.ByteString;
import org.sparkproject.spark_core.protobuf.DescriptorProtos.FileDescriptorProto;
import org.sparkproject.spark_core.protobuf.DescriptorProtos.FileDescriptorSet;
import org.sparkproject.spark_core.protobuf.Descriptors.Descriptor;
import org.sparkproject.spark_core.protobuf.Descriptors.DescriptorValidationException;
import org.sparkproject.spark_core.protobuf.Descriptors.EnumValueDescriptor;
import org.sparkproject.spark_core.protobuf.Descriptors.FieldDescriptor;
import org.sparkproject.spark_core.protobuf.Descriptors.FileDescriptor;
import org.sparkproject.spark_core.protobuf.DynamicMessage;
import org.sparkproject.spark_core.protobuf.InvalidProtocolBufferException;

/**
 * One Protobuf message type's payloads decoded into the Spark struct of its table's columns
 * ({@code spark_jobs.protobuf_decoder} says why this is ours and not spark-protobuf's {@code from_protobuf}).
 *
 * <p>The struct is given: {@code kafkalake.protobuf_schema} renders the message as an Avro record and spark-avro maps
 * that to Spark's types, so the column types are decided in one place. This class fills a row field by field, by
 * name: a field with presence (a message, a wrapper, proto3 {@code optional}, a {@code oneof} arm) that is unset is
 * null, a field without presence is its value (proto3's zero value included); {@code Timestamp} is an instant, a
 * wrapper its value, an enum its name (an unknown number its digits), a map's keys their text. A payload that does not
 * parse is null (the caller quarantines it). The protobuf runtime is the one Spark's core jar relocates
 * ({@code org.sparkproject.spark_core.protobuf}), so the jobs ship no second copy that could clash with another on
 * the classpath.
 */
public final class ProtobufDecoder implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;
    private static final String TIMESTAMP = "google.protobuf.Timestamp";
    private static final String WRAPPERS = "google.protobuf.";

    private final byte[] descriptorSet;
    private final String messageName;
    private final String schemaJson;
    private transient Reader reader;

    private ProtobufDecoder(byte[] descriptorSet, String messageName, String schemaJson) {
        this.descriptorSet = descriptorSet.clone();
        this.messageName = messageName;
        this.schemaJson = schemaJson;
    }

    /**
     * The decoder of {@code messageName} (a full name, nested ones included) from a serialized FileDescriptorSet
     * holding its file and every import, into the struct {@code schemaJson} (Spark's JSON of a StructType). Checked
     * here, on the driver: a message or field the descriptors lack fails with its name.
     */
    public static UserDefinedFunction function(byte[] descriptorSet, String messageName, String schemaJson) {
        ProtobufDecoder decoder = new ProtobufDecoder(descriptorSet, messageName, schemaJson);
        decoder.reader();
        return functions.udf(decoder, DataType.fromJson(schemaJson)).withName("protobuf_" + messageName.replace('.', '_'));
    }

    @Override
    public Row call(byte[] payload) {
        if (payload == null) {
            return null;
        }
        Reader read = reader();
        try {
            return read.row(DynamicMessage.parseFrom(read.descriptor, payload));
        } catch (InvalidProtocolBufferException e) {
            return null;
        }
    }

    private Reader reader() {
        if (reader == null) {
            reader = new Reader(message(descriptorSet, messageName), (StructType) DataType.fromJson(schemaJson));
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

    /** How one value of a field becomes the Spark value of its column. */
    private interface Value {
        Object of(Object value);
    }

    /** A message's fields read into a row of its struct, in the struct's order. */
    private static final class Reader {
        final Descriptor descriptor;
        final FieldDescriptor[] fields;
        final Value[] values;

        Reader(Descriptor descriptor, StructType struct) {
            this.descriptor = descriptor;
            StructField[] columns = struct.fields();
            this.fields = new FieldDescriptor[columns.length];
            this.values = new Value[columns.length];
            for (int i = 0; i < columns.length; i++) {
                FieldDescriptor field = descriptor.findFieldByName(columns[i].name());
                if (field == null) {
                    throw new IllegalArgumentException(
                            "message " + descriptor.getFullName() + " has no field " + columns[i].name());
                }
                fields[i] = field;
                values[i] = column(field, columns[i].dataType());
            }
        }

        Row row(DynamicMessage message) {
            Object[] out = new Object[fields.length];
            for (int i = 0; i < fields.length; i++) {
                FieldDescriptor field = fields[i];
                if (!field.isRepeated() && field.hasPresence() && !message.hasField(field)) {
                    continue;
                }
                out[i] = values[i].of(message.getField(field));
            }
            return RowFactory.create(out);
        }
    }

    private static Value column(FieldDescriptor field, DataType type) {
        if (field.isMapField()) {
            MapType map = (MapType) type;
            Descriptor entry = field.getMessageType();
            FieldDescriptor keyField = entry.findFieldByNumber(1);
            FieldDescriptor valueField = entry.findFieldByNumber(2);
            Value key = single(keyField, map.keyType());
            Value value = single(valueField, map.valueType());
            return entries -> {
                Map<Object, Object> out = new HashMap<>();
                for (Object item : (List<?>) entries) {
                    DynamicMessage pair = (DynamicMessage) item;
                    out.put(key.of(pair.getField(keyField)), value.of(pair.getField(valueField)));
                }
                return out;
            };
        }
        if (field.isRepeated()) {
            Value element = single(field, ((ArrayType) type).elementType());
            return items -> {
                List<?> list = (List<?>) items;
                List<Object> out = new ArrayList<>(list.size());
                for (Object item : list) {
                    out.add(element.of(item));
                }
                return out;
            };
        }
        return single(field, type);
    }

    private static Value single(FieldDescriptor field, DataType type) {
        switch (field.getJavaType()) {
            case MESSAGE:
                return message(field.getMessageType(), type);
            case ENUM:
                return value -> {
                    EnumValueDescriptor named = (EnumValueDescriptor) value;
                    return named.getIndex() < 0 ? Integer.toString(named.getNumber()) : named.getName();
                };
            case BYTE_STRING:
                return value -> ((ByteString) value).toByteArray();
            default:
                return scalar(type);
        }
    }

    /** A number or text as the column's type holds it (an unsigned 32-bit number in a long, a map key as text). */
    private static Value scalar(DataType type) {
        if (type.equals(DataTypes.StringType)) {
            return String::valueOf;
        }
        if (type.equals(DataTypes.LongType)) {
            return value -> value instanceof Integer ? Integer.toUnsignedLong((Integer) value) : value;
        }
        return value -> value;
    }

    private static Value message(Descriptor message, DataType type) {
        String name = message.getFullName();
        if (name.equals(TIMESTAMP)) {
            FieldDescriptor seconds = message.findFieldByName("seconds");
            FieldDescriptor nanos = message.findFieldByName("nanos");
            return value -> {
                DynamicMessage stamp = (DynamicMessage) value;
                return Instant.ofEpochSecond((Long) stamp.getField(seconds), (Integer) stamp.getField(nanos));
            };
        }
        if (name.startsWith(WRAPPERS) && name.endsWith("Value") && message.getFields().size() == 1
                && message.getFields().get(0).getName().equals("value") && !(type instanceof StructType)) {
            FieldDescriptor wrapped = message.getFields().get(0);
            Value inner = single(wrapped, type);
            return value -> inner.of(((DynamicMessage) value).getField(wrapped));
        }
        Reader nested = new Reader(message, (StructType) type);
        return value -> nested.row((DynamicMessage) value);
    }
}
